import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { newEventId } from '@postbox/engine';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { spawnPostbox } from '../support/processes.ts';
import { stack } from '../support/stack.ts';

let db: TestDatabase;

before(async () => {
  db = await freshDatabase();
});

after(async () => {
  await db.drop();
});

async function failure(daysAgo: number): Promise<number> {
  const [row] = await db.sql<{ failure_id: number }[]>`
    INSERT INTO message_failure (consumer_name, event_id, event_type, aggregate_id, aggregate_version, topic, broker_partition,
                                 broker_offset, payload, headers, error_code, error_detail, attempts, first_failed_at, last_failed_at)
    VALUES ('keeper', ${newEventId()}, 'T', ${`agg-${daysAgo}`}, 1, 't', 0, 0, ${Buffer.from('{"card":"4111"}')}, ${db.sql.json({ ce_type: 'T' })},
            'error', 'boom', 1, now() - ${daysAgo} * interval '1 day', now() - ${daysAgo} * interval '1 day')
    RETURNING failure_id::int`;
  return row!.failure_id;
}

async function cli(...args: string[]): Promise<string> {
  const run = spawnPostbox(['failures', ...args], {
    DATABASE_URL: db.url,
    REDIS_URL: stack.REDIS_URL,
    KAFKA_BROKERS: stack.KAFKA_BROKERS,
  });
  assert.equal(await run.exited, 0, run.output());
  return run.output();
}

test('payload retention removes old payloads, keeps the rows, and a purged failure is not replayable', async () => {
  const old = await failure(40);
  const recent = await failure(2);
  assert.match(await cli('purge', '--older-than-days', '30'), /purged the payload of 1 failure\(s\)/);
  const rows = await db.sql<
    { failure_id: number; payload: Buffer | null; headers: unknown; purged: boolean; error_detail: string }[]
  >`
    SELECT failure_id::int, payload, headers, payload_purged_at IS NOT NULL AS purged, error_detail FROM message_failure ORDER BY failure_id`;
  const byId = new Map(rows.map((r) => [r.failure_id, r]));
  assert.deepEqual(
    {
      payload: byId.get(old)!.payload,
      headers: byId.get(old)!.headers,
      purged: byId.get(old)!.purged,
      detail: byId.get(old)!.error_detail,
    },
    { payload: null, headers: null, purged: true, detail: 'boom' },
  );
  assert.equal(byId.get(recent)!.payload?.toString(), '{"card":"4111"}');
  assert.equal(byId.get(recent)!.purged, false);
  const dry = await cli('replay', '--id', String(old), '--reason', 'try', '--dry-run');
  assert.match(dry, /not_replayable\s+the payload was removed by retention/);
  assert.match(await cli('purge', '--older-than-days', '30'), /purged the payload of 0 failure\(s\)/);
});
