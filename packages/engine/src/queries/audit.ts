import type { Queryable } from '../db/connect.ts';

export interface AuditEntry {
  actor: string;
  action: string;
  reason: string | null;
  target: string | null;
  before: unknown;
  after: unknown;
  outcome?: string;
}

/** Appends one operator action to the audit log, in the caller's transaction. Locks: none. */
export async function insertAudit(tx: Queryable, e: AuditEntry): Promise<number> {
  const [row] = await tx<{ audit_id: string }[]>`
    INSERT INTO operator_audit (actor, action, reason, target, before, after, outcome)
    VALUES (${e.actor}, ${e.action}, ${e.reason}, ${e.target},
            ${e.before === undefined ? null : tx.json(e.before as never)}, ${e.after === undefined ? null : tx.json(e.after as never)},
            ${e.outcome ?? 'ok'})
    RETURNING audit_id`;
  return Number(row!.audit_id);
}

export interface AuditFilter {
  actor?: string;
  action?: string;
  outcome?: string;
  since?: Date;
  until?: Date;
}

export interface AuditRow {
  audit_id: number;
  actor: string;
  action: string;
  reason: string | null;
  target: string | null;
  before: unknown;
  after: unknown;
  outcome: string;
  at: Date;
}

/** Audit records, newest first, keyset-paged by audit_id. Parameters: filter, page size, last id seen. Locks: none. */
export async function listAudit(
  sql: Queryable,
  f: AuditFilter,
  limit: number,
  beforeId: number | null,
): Promise<AuditRow[]> {
  return [
    ...(await sql<AuditRow[]>`
    SELECT audit_id::int, actor, action, reason, target, before, after, outcome, at
    FROM operator_audit
    WHERE (${f.actor ?? null}::text IS NULL OR actor = ${f.actor ?? null})
      AND (${f.action ?? null}::text IS NULL OR action = ${f.action ?? null})
      AND (${f.outcome ?? null}::text IS NULL OR outcome = ${f.outcome ?? null})
      AND (${f.since ?? null}::timestamptz IS NULL OR at >= ${f.since ?? null})
      AND (${f.until ?? null}::timestamptz IS NULL OR at < ${f.until ?? null})
      AND (${beforeId}::bigint IS NULL OR audit_id < ${beforeId})
    ORDER BY audit_id DESC
    LIMIT ${limit}`),
  ];
}
