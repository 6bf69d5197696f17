import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { spawnPostbox, waitFor } from '../support/processes.ts';
import { stack } from '../support/stack.ts';
import { ceRecord, committedOffsets, createHandlerTables, produce, TEST_CONSUMER_MODULE } from '../support/consumer.ts';

let db: TestDatabase;
const topic = uniqueTopic('crash');
const AGGREGATES = 25;
const VERSIONS = 4;

before(async () => {
  db = await freshDatabase();
  await createTopic(topic, 3);
  await createHandlerTables(db.sql);
});

after(async () => {
  await db.drop();
});

test('kill -9 after the database commit and before the offset commit: redelivered, absorbed, no double side effect', async () => {
  const records = [];
  for (let v = 1; v <= VERSIONS; v++)
    for (let a = 0; a < AGGREGATES; a++) records.push(ceRecord({ aggregate_id: `c-${a}`, version: v }));
  await produce(topic, records);
  const env = {
    DATABASE_URL: db.url,
    KAFKA_BROKERS: stack.KAFKA_BROKERS,
    TEST_TOPIC: topic,
    TEST_CONSUMER: 'crashy',
    LOG_LEVEL: 'warn',
  };

  const doomed = spawnPostbox(['consume', TEST_CONSUMER_MODULE], {
    ...env,
    POSTBOX_FAILPOINT: 'consumer.after-commit-before-offset',
  });
  const code = await Promise.race([doomed.exited, new Promise((r) => setTimeout(() => r('timeout'), 40_000).unref())]);
  assert.equal(code, null, `killed by its failpoint, not exited (${code}): ${doomed.output()}`);
  assert.equal(doomed.child.signalCode, 'SIGKILL');
  const { n: appliedBeforeCrash } = (await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM test_applied`)[0]!;
  assert.ok(appliedBeforeCrash > 0, 'the first batch was committed in the database');
  const offsets = await committedOffsets('postbox.crashy', topic);
  assert.ok(
    [...offsets.values()].every((o) => o === '-1'),
    `no offset was committed: ${JSON.stringify([...offsets])}`,
  );

  const survivor = spawnPostbox(['consume', TEST_CONSUMER_MODULE], env);
  try {
    await waitFor(
      'every event applied after the restart',
      async () => {
        const { n } = (
          await db.sql<{ n: number }[]>`SELECT count(DISTINCT (aggregate_id, version))::int AS n FROM test_applied`
        )[0]!;
        return n === records.length;
      },
      40_000,
    );
  } finally {
    survivor.kill('SIGTERM');
    assert.equal(await survivor.exited, 0, survivor.output());
  }
  const stats = JSON.parse(
    survivor
      .output()
      .split('\n')
      .find((l) => l.includes('"consumer-stats"'))!,
  )['consumer-stats'];
  assert.ok(
    stats.duplicates >= appliedBeforeCrash,
    `the ${appliedBeforeCrash} events applied before the crash came again as duplicates (${stats.duplicates})`,
  );
  assert.equal(stats.applied + stats.drained, records.length - appliedBeforeCrash);

  const { rows } = (await db.sql<{ rows: number }[]>`SELECT count(*)::int AS rows FROM test_applied`)[0]!;
  assert.equal(rows, records.length, 'each side effect happened exactly once');
  const { bad } = (
    await db.sql<
      { bad: number }[]
    >`SELECT count(*)::int AS bad FROM demo_order_projection WHERE applied_count <> ${VERSIONS}`
  )[0]!;
  assert.equal(bad, 0);
  const after = await committedOffsets('postbox.crashy', topic);
  const total = [...after.values()].reduce((s, o) => s + Number(o), 0);
  assert.equal(total, records.length, 'the survivor committed every partition to its end on SIGTERM');
});
