import kafkajs, { type AclEntry, type AclFilter } from 'kafkajs';
import type { KafkaAcl, KafkaPrincipals, KafkaResourceType } from '../../migrate/broker-grants.ts';
import { BROKER_ROLES } from '../../migrate/broker-grants.ts';
import { classifyKafkaError } from './classify.ts';
import { createKafka, type KafkaConnection } from './client.ts';

// kafkajs is CommonJS and its enums are not found as named exports.
const { AclOperationTypes, AclPermissionTypes, AclResourceTypes, ResourcePatternTypes } = kafkajs;

const RESOURCE: Record<KafkaResourceType, number> = {
  topic: AclResourceTypes.TOPIC,
  group: AclResourceTypes.GROUP,
  cluster: AclResourceTypes.CLUSTER,
};

/** What a sync changed, per principal. */
export interface KafkaAclSync {
  created: number;
  deleted: number;
}

/**
 * Brings the ACLs of the roles' principals to exactly `acls` (ALLOW, literal names, any host): the missing ones
 * created, every other entry of those principals — a grant taken out of the matrix, a DENY, a prefixed pattern —
 * deleted, so running it twice changes nothing. Needs a connection whose user may alter ACLs (a super user, or
 * ALTER on the cluster). Other principals' ACLs are left alone. Throws a classified BrokerError.
 */
export async function syncKafkaAcls(
  connection: KafkaConnection,
  acls: readonly KafkaAcl[],
  principals: KafkaPrincipals,
): Promise<KafkaAclSync> {
  const admin = createKafka(connection).admin();
  try {
    await admin.connect();
    const wanted = acls.map((a) => toEntry(a, principals));
    const existing: AclEntry[] = [];
    for (const role of BROKER_ROLES) {
      const found = await admin.describeAcls({ ...ANY, principal: principals[role] });
      for (const r of found.resources)
        for (const acl of r.acls)
          existing.push({
            resourceType: r.resourceType,
            resourceName: r.resourceName,
            resourcePatternType: r.resourcePatternType,
            ...acl,
          });
    }
    const wantedKeys = new Set(wanted.map(entryKey));
    const existingKeys = new Set(existing.map(entryKey));
    const extra = existing.filter((e) => !wantedKeys.has(entryKey(e)));
    const missing = wanted.filter((w) => !existingKeys.has(entryKey(w)));
    // Created before the extra ones go: a grant that only changes shape is never missing for the running roles.
    if (missing.length > 0) await admin.createAcls({ acl: missing });
    if (extra.length > 0) await admin.deleteAcls({ filters: extra.map(exactFilter) });
    return { created: missing.length, deleted: extra.length };
  } catch (cause) {
    throw classifyKafkaError(cause);
  } finally {
    await admin.disconnect().catch(() => {});
  }
}

const ANY: AclFilter = {
  resourceType: AclResourceTypes.ANY,
  resourcePatternType: ResourcePatternTypes.ANY,
  operation: AclOperationTypes.ANY,
  permissionType: AclPermissionTypes.ANY,
};

function toEntry(a: KafkaAcl, principals: KafkaPrincipals): AclEntry {
  return {
    resourceType: RESOURCE[a.resourceType],
    resourceName: a.name,
    resourcePatternType: ResourcePatternTypes.LITERAL,
    principal: principals[a.role],
    host: '*',
    operation: AclOperationTypes[a.operation],
    permissionType: AclPermissionTypes.ALLOW,
  };
}

function entryKey(e: AclEntry): string {
  return [
    e.principal,
    e.host,
    e.resourceType,
    e.resourcePatternType,
    e.resourceName,
    e.operation,
    e.permissionType,
  ].join('\u0000');
}

function exactFilter(e: AclEntry): AclFilter {
  return { ...e };
}
