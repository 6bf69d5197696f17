import { ConfigError, generatePayloadKey, parsePayloadKeys, type Sql } from '@postbox/engine';
import { insertAudit, payloadKeyUsage, rotatePayloadKeys } from '@postbox/engine/control';
import { operatorCommand, operatorUrl, withDatabase } from './operator-command.ts';

const HELP = `postbox keys — payload encryption at rest of the failure store and the retry ledger

usage: postbox keys status
       postbox keys rotate [--dry-run] [--batch N] [--actor NAME]
       postbox keys generate [--id ID]

status    rows of message_failure and message_retry per key that seals them (clear, purged, or a key id)
rotate    seals every row with the ring's first key: rows of an older key are re-encrypted, clear rows
          encrypted, in batches of --batch (500) rows per transaction with progress; a stopped run resumes.
          Audited. Then the older key may leave POSTBOX_PAYLOAD_KEYS.
generate  prints a new ring entry id:base64key (32 random bytes) to put first in POSTBOX_PAYLOAD_KEYS

Environment: POSTBOX_PAYLOAD_KEYS (id:base64key,… — the first encrypts, the others only decrypt),
DATABASE_URL_OPERATOR or DATABASE_URL.
Exit: 0 done, 1 an error (a row whose key is not in the ring stops the run; batches before it stay), 2 usage.`;

export const keysCommand = operatorCommand({
  name: 'keys',
  help: HELP,
  options: {
    'dry-run': { type: 'boolean' },
    batch: { type: 'string' },
    actor: { type: 'string' },
    id: { type: 'string' },
  },
  verb: 'required',
  usageErrors: 'throw',
  async run({ values, verb }) {
    if (verb === 'generate') {
      console.log(generatePayloadKey(values.id ?? `k${new Date().toISOString().slice(0, 10).replaceAll('-', '')}`));
      return 0;
    }
    if (verb !== 'status' && verb !== 'rotate')
      throw new ConfigError(`unknown keys command "${verb}" (status | rotate | generate)`);
    return withDatabase({ command: 'keys', url: await operatorUrl(), max: 2 }, async (sql) => {
      if (verb === 'status') {
        for (const u of await payloadKeyUsage(sql)) console.log(`${u.table.padEnd(16)} ${u.key.padEnd(12)} ${u.rows}`);
        return 0;
      }
      return await rotate(sql, values);
    });
  },
});

async function rotate(sql: Sql, values: { 'dry-run'?: boolean; batch?: string; actor?: string }): Promise<number> {
  const ring = parsePayloadKeys(process.env.POSTBOX_PAYLOAD_KEYS);
  if (!ring)
    throw new ConfigError('postbox keys rotate: POSTBOX_PAYLOAD_KEYS is not set (postbox keys generate makes a key)');
  const batchSize = values.batch === undefined ? 500 : Number(values.batch);
  if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > 10_000)
    throw new ConfigError(`--batch must be an integer 1…10000, got ${values.batch}`);
  const dryRun = values['dry-run'] ?? false;
  const before = dryRun ? null : await payloadKeyUsage(sql);
  const result = await rotatePayloadKeys(sql, ring, {
    batchSize,
    dryRun,
    onProgress: (p) => process.stderr.write(`${p.table}: ${p.done}/${p.total} sealed with "${ring.primary}"\n`),
  });
  const summary = `message_failure ${result.failures} row(s), message_retry ${result.retries} row(s)`;
  if (dryRun) {
    console.log(`would seal with "${ring.primary}": ${summary}`);
    return 0;
  }
  await insertAudit(sql, {
    actor: values.actor ?? process.env.USER ?? 'operator',
    action: 'keys.rotate',
    reason: `payload key rotation to "${ring.primary}"`,
    target: 'message_failure,message_retry',
    before: { rows_by_key: before },
    after: {
      primary: ring.primary,
      failures: result.failures,
      retries: result.retries,
      rows_by_key: await payloadKeyUsage(sql),
    },
  });
  console.log(`sealed with "${ring.primary}": ${summary}`);
  return 0;
}
