import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { BullmqRetryScheduler } from '@postbox/engine/bullmq';
import { backoffCeilingMs, defaultBackoff } from '@postbox/engine/runtime';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { spawnPostbox, waitFor, type RoleProcess } from '../support/processes.ts';
import { stack } from '../support/stack.ts';
import {
  appliedSequences,
  ceRecord,
  committedOffsets,
  createHandlerTables,
  produce,
  TEST_CONSUMER_MODULE,
  type RawRecord,
} from '../support/consumer.ts';

// Durable retries end to end: `postbox consume` processes with the retry ledger (PostgreSQL) and the BullMQ
// scheduler (the stack's Redis), a transient failure lets the partition move on, the retry fires on schedule.

let db: TestDatabase;

before(async () => {
  db = await freshDatabase();
  await createHandlerTables(db.sql);
});

after(async () => {
  await db.drop();
});

function consume(consumer: string, topic: string, env: Record<string, string> = {}): RoleProcess {
  return spawnPostbox(['consume', TEST_CONSUMER_MODULE], {
    DATABASE_URL: db.url,
    KAFKA_BROKERS: stack.KAFKA_BROKERS,
    REDIS_URL: stack.REDIS_URL,
    TEST_TOPIC: topic,
    TEST_CONSUMER: consumer,
    LOG_LEVEL: 'warn',
    ...env,
  });
}

async function stop(p: RoleProcess): Promise<void> {
  p.kill('SIGTERM');
  assert.equal(await p.exited, 0, p.output().slice(-3000));
}

async function appliedCount(consumer: string): Promise<number> {
  const [row] = await db.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM test_applied WHERE consumer = ${consumer}`;
  return row!.n;
}

function healthy(prefix: string, aggregates: number, versions: number): RawRecord[] {
  const out: RawRecord[] = [];
  for (let v = 1; v <= versions; v++)
    for (let a = 0; a < aggregates; a++) out.push(ceRecord({ aggregate_id: `${prefix}-${a}`, version: v }));
  return out;
}

test('a handler failing transiently twice then succeeding is applied once; the attempts fall inside the backoff bounds; the partition moves on meanwhile', async () => {
  const topic = uniqueTopic('retry-flaky');
  await createTopic(topic, 1);
  const flaky = ceRecord({ aggregate_id: 'r-flaky', version: 1, data: { failAttempts: 2 } });
  const expired = ceRecord({
    aggregate_id: 'r-late',
    version: 1,
    data: { failAttempts: 99 },
    headers: { ce_deadline: new Date(Date.now() - 1000).toISOString() },
  });
  const records = [
    flaky,
    expired,
    ceRecord({ aggregate_id: 'r-flaky', version: 2 }),
    ceRecord({ aggregate_id: 'r-flaky', version: 3 }),
    ...healthy('r-ok', 20, 3),
  ];
  await produce(topic, records);
  const p = consume('flaky', topic);
  try {
    await waitFor(
      'r-flaky applied up to v3',
      async () => (await appliedSequences(db.sql, 'flaky')).get('r-flaky')?.length === 3,
      30_000,
    );
    await waitFor(
      'every offset committed',
      async () => (await committedOffsets('postbox.flaky', topic)).get(0) === String(records.length),
      10_000,
    );
  } finally {
    await stop(p);
  }
  const sequences = await appliedSequences(db.sql, 'flaky');
  assert.deepEqual(sequences.get('r-flaky'), [1, 2, 3], 'in order, v2 and v3 drained after the retry');
  for (let a = 0; a < 20; a++) assert.deepEqual(sequences.get(`r-ok-${a}`), [1, 2, 3]);
  const [projection] = await db.sql<
    { applied_count: number }[]
  >`SELECT applied_count FROM demo_order_projection WHERE order_id = 'r-flaky'`;
  assert.equal(projection!.applied_count, 3, 'each version applied exactly once');

  // The attempts, as the handler saw them (logged on a connection of its own, so failed ones count too).
  const attempts = await db.sql<{ attempt: number; at: Date }[]>`
    SELECT attempt, max(at) AS at FROM test_attempt WHERE consumer = 'flaky' AND event_id = ${flaky.headers.ce_id!} GROUP BY attempt ORDER BY attempt`;
  assert.deepEqual(
    attempts.map((a) => a.attempt),
    [1, 2, 3],
  );
  const slackMs = 1500; // BullMQ's delayed-job promotion + one consume task
  for (let i = 1; i < attempts.length; i++) {
    const gap = attempts[i]!.at.getTime() - attempts[i - 1]!.at.getTime();
    const ceiling = backoffCeilingMs(i - 1, defaultBackoff);
    assert.ok(
      gap >= 0 && gap <= ceiling + slackMs,
      `attempt ${i + 1} came ${gap} ms after attempt ${i}; full jitter allows 0…${ceiling} ms`,
    );
  }
  const [ledger] = await db.sql<
    { status: string; attempt: number }[]
  >`SELECT status, attempt FROM message_retry WHERE consumer_name = 'flaky' AND event_id = ${flaky.headers.ce_id!}`;
  assert.deepEqual({ ...ledger }, { status: 'done', attempt: 3 });
  const [blocked] = await db.sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM consumer_blocked_aggregate WHERE consumer_name = 'flaky' AND aggregate_id = 'r-flaky'`;
  assert.equal(blocked!.n, 0, 'unblocked');
  const [parked] = await db.sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM message_parked WHERE consumer_name = 'flaky' AND aggregate_id = 'r-flaky'`;
  assert.equal(parked!.n, 0, 'drained');
  const [inbox] = await db.sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM message_inbox WHERE consumer_name = 'flaky' AND aggregate_id = 'r-flaky'`;
  assert.equal(inbox!.n, 3);

  // Past its deadline, a transient failure is not retried: it ends as 'expired'.
  const [late] = await db.sql<
    { status: string; error_code: string }[]
  >`SELECT status, error_code FROM message_failure WHERE consumer_name = 'flaky' AND aggregate_id = 'r-late'`;
  assert.deepEqual({ ...late }, { status: 'expired', error_code: 'expired' });
  assert.equal(sequences.get('r-late'), undefined);
});

test('budget exhausted: failure row with attempts and error, aggregate blocked, later versions parked; a dry run changes nothing; replay after the fix applies all in order, audited, with the original id', async () => {
  const topic = uniqueTopic('retry-budget');
  await createTopic(topic, 2);
  await db.sql`UPDATE test_handler_control SET fail_aggregates = '{b-down}'`;
  const head = ceRecord({ aggregate_id: 'b-down', version: 1 });
  const records = [
    head,
    ceRecord({ aggregate_id: 'b-down', version: 2 }),
    ceRecord({ aggregate_id: 'b-down', version: 3 }),
    ...healthy('b-ok', 10, 2),
  ];
  await produce(topic, records);
  const p = consume('budget', topic, { TEST_RETRY: JSON.stringify({ maxAttempts: 3, baseMs: 100, capMs: 200 }) });
  try {
    await waitFor(
      'the failure row',
      async () => (await db.sql`SELECT 1 FROM message_failure WHERE consumer_name = 'budget'`).length === 1,
      30_000,
    );
    await waitFor('healthy aggregates applied', async () => (await appliedCount('budget')) === 20, 20_000);
    const [failure] = await db.sql<
      {
        failure_id: number;
        attempts: number;
        error_code: string;
        error_detail: string;
        status: string;
        event_id: string;
        envelope: { event_id: string; aggregate_version: number };
        spread: boolean;
      }[]
    >`
      SELECT failure_id::int, attempts, error_code, error_detail, status, event_id, envelope, first_failed_at < last_failed_at AS spread
      FROM message_failure WHERE consumer_name = 'budget'`;
    assert.deepEqual(
      { id: failure!.envelope.event_id, version: failure!.envelope.aggregate_version },
      { id: head.headers.ce_id, version: 1 },
      'the envelope is stored',
    );
    assert.ok(failure!.spread, 'first failure (attempt 1) before the last (attempt 3)');
    assert.equal(failure!.attempts, 3);
    assert.equal(failure!.error_code, 'error');
    assert.match(
      failure!.error_detail,
      /retry budget spent \(attempts\) after 3 attempt\(s\): downstream for b-down is down/,
    );
    assert.equal(failure!.status, 'open');
    assert.equal(failure!.event_id, head.headers.ce_id);
    const blocked = await db.sql<
      { reason: string; event_id: string }[]
    >`SELECT reason, event_id FROM consumer_blocked_aggregate WHERE consumer_name = 'budget'`;
    assert.deepEqual(
      blocked.map((b) => ({ ...b })),
      [{ reason: 'failed', event_id: head.headers.ce_id }],
    );
    await waitFor(
      'v2 and v3 parked',
      async () =>
        (await db.sql`SELECT 1 FROM message_parked WHERE consumer_name = 'budget' AND aggregate_id = 'b-down'`)
          .length === 2,
      10_000,
    );

    const cli = async (...args: string[]) => {
      const run = spawnPostbox(['failures', ...args], {
        DATABASE_URL: db.url,
        REDIS_URL: stack.REDIS_URL,
        KAFKA_BROKERS: stack.KAFKA_BROKERS,
        USER: 'test-operator',
      });
      assert.equal(await run.exited, 0, run.output());
      return run.output();
    };
    // The operator's view, printed so a test log shows the commands and what they say.
    const blockedOut = await cli('blocked', '--consumer', 'budget');
    const listOut = await cli('list', '--consumer', 'budget');
    const showOut = await cli('show', String(failure!.failure_id));
    console.log(
      `$ postbox failures blocked --consumer budget\n${blockedOut}$ postbox failures list --consumer budget\n${listOut}$ postbox failures show ${failure!.failure_id}\n${showOut}`,
    );
    assert.match(blockedOut, /b-down\s.*failed\s+2/);
    assert.match(listOut, new RegExp(`${failure!.failure_id}\\s+budget\\s+error`));
    assert.equal(JSON.parse(showOut).payload_utf8, head.value!.toString());

    await db.sql`UPDATE test_handler_control SET fail_aggregates = '{}'`;
    const snapshot = () => db.sql`SELECT
      (SELECT json_agg(f ORDER BY failure_id) FROM (SELECT failure_id, status, attempts, replayed_at FROM message_failure) f) AS failures,
      (SELECT json_agg(r ORDER BY event_id) FROM (SELECT event_id, status, attempt, next_attempt_at FROM message_retry) r) AS ledger,
      (SELECT count(*) FROM operator_audit) AS audit, (SELECT count(*) FROM message_parked) AS parked,
      (SELECT count(*) FROM consumer_blocked_aggregate) AS blocked, (SELECT count(*) FROM message_inbox) AS inbox`;
    const before = await snapshot();
    const dry = await cli('replay', '--consumer', 'budget', '--reason', 'check before the fix', '--dry-run');
    assert.match(dry, /would_apply/);
    assert.match(dry, /dry run: 1 failure\(s\) checked, nothing changed/);
    assert.deepEqual(await snapshot(), before, 'a dry run changes no row');

    const replay = await cli('replay', '--consumer', 'budget', '--reason', 'downstream fixed (INC-42)');
    console.log(
      `$ postbox failures replay --consumer budget --reason "check before the fix" --dry-run\n${dry}$ postbox failures replay --consumer budget --reason "downstream fixed (INC-42)"\n${replay}`,
    );
    assert.match(replay, /1 replay\(s\) scheduled, audited/);
    await waitFor(
      'b-down applied 1, 2, 3',
      async () => (await appliedSequences(db.sql, 'budget')).get('b-down')?.length === 3,
      20_000,
    );
    assert.deepEqual((await appliedSequences(db.sql, 'budget')).get('b-down'), [1, 2, 3]);
    const [applied] = await db.sql<
      { event_id: string }[]
    >`SELECT event_id FROM test_applied WHERE consumer = 'budget' AND aggregate_id = 'b-down' AND version = 1`;
    assert.equal(applied!.event_id, head.headers.ce_id, 'the replayed event keeps its id');
    const [after1] = await db.sql<
      { status: string }[]
    >`SELECT status FROM message_failure WHERE failure_id = ${failure!.failure_id}`;
    assert.equal(after1!.status, 'replayed');
    assert.equal(
      (await db.sql`SELECT 1 FROM consumer_blocked_aggregate WHERE consumer_name = 'budget'`).length,
      0,
      'unblocked',
    );
    assert.equal(
      (await db.sql`SELECT 1 FROM message_parked WHERE consumer_name = 'budget'`).length,
      0,
      'parked versions drained',
    );
    const audit = await db.sql<
      {
        actor: string;
        action: string;
        reason: string;
        target: string;
        before: { status: string };
        after: { event_id: string };
      }[]
    >`
      SELECT actor, action, reason, target, before, after FROM operator_audit ORDER BY audit_id`;
    assert.equal(audit.length, 1);
    assert.deepEqual(
      {
        actor: audit[0]!.actor,
        action: audit[0]!.action,
        reason: audit[0]!.reason,
        target: audit[0]!.target,
        before: audit[0]!.before.status,
        after: audit[0]!.after.event_id,
      },
      {
        actor: 'test-operator',
        action: 'failure.replay',
        reason: 'downstream fixed (INC-42)',
        target: `failure:${failure!.failure_id}`,
        before: 'open',
        after: head.headers.ce_id,
      },
    );
  } finally {
    await stop(p);
  }
});

test('a replay of an edited payload is a new event that names the one it replaces', async () => {
  const topic = uniqueTopic('retry-edit');
  await createTopic(topic, 1);
  const bad = ceRecord({ aggregate_id: 'e-1', version: 1, data: { poison: true } });
  await produce(topic, [bad, ceRecord({ aggregate_id: 'e-1', version: 2 })]);
  const p = consume('edit', topic);
  try {
    await waitFor(
      'the failure row',
      async () => (await db.sql`SELECT 1 FROM message_failure WHERE consumer_name = 'edit'`).length === 1,
      30_000,
    );
    const run = spawnPostbox(
      ['failures', 'replay', '--consumer', 'edit', '--reason', 'corrected payload', '--data', '{"fixed":true}'],
      { DATABASE_URL: db.url, REDIS_URL: stack.REDIS_URL, KAFKA_BROKERS: stack.KAFKA_BROKERS },
    );
    assert.equal(await run.exited, 0, run.output());
    await waitFor(
      'e-1 applied 1, 2',
      async () => (await appliedSequences(db.sql, 'edit')).get('e-1')?.length === 2,
      20_000,
    );
  } finally {
    await stop(p);
  }
  const [v1] = await db.sql<
    { event_id: string }[]
  >`SELECT event_id FROM test_applied WHERE consumer = 'edit' AND aggregate_id = 'e-1' AND version = 1`;
  assert.notEqual(v1!.event_id, bad.headers.ce_id, 'a new event');
  const [audit] = await db.sql<
    { action: string; after: { event_id: string; replaces_event_id: string } }[]
  >`SELECT action, after FROM operator_audit WHERE target LIKE 'failure:%' AND action = 'failure.replay_edited'`;
  assert.deepEqual(
    { event: audit!.after.event_id, replaces: audit!.after.replaces_event_id },
    { event: v1!.event_id, replaces: bad.headers.ce_id },
  );
  const [failure] = await db.sql<{ status: string }[]>`SELECT status FROM message_failure WHERE consumer_name = 'edit'`;
  assert.equal(failure!.status, 'replayed');
  const [ledger] = await db.sql<
    { record: { headers: Record<string, string>; value: string } }[]
  >`SELECT record FROM message_retry WHERE consumer_name = 'edit' AND event_id = ${v1!.event_id}`;
  assert.equal(
    ledger!.record.headers.replaces,
    bad.headers.ce_id,
    'the ledger keeps the record with broker-neutral headers',
  );
  assert.deepEqual(JSON.parse(Buffer.from(ledger!.record.value, 'base64').toString()), { fixed: true });
});

test('the process dies between scheduling and the due time: the retry still fires after a restart', async () => {
  const topic = uniqueTopic('retry-restart');
  await createTopic(topic, 1);
  const flaky = ceRecord({ aggregate_id: 'k-1', version: 1, data: { failAttempts: 1 } });
  await produce(topic, [flaky, ...healthy('k-ok', 5, 1)]);
  const retry = JSON.stringify({ minDelayMs: 6000, baseMs: 100, capMs: 100 });
  const first = consume('restart', topic, { TEST_RETRY: retry });
  await waitFor(
    'the ledger row',
    async () =>
      (await db.sql`SELECT 1 FROM message_retry WHERE consumer_name = 'restart' AND status = 'scheduled'`).length === 1,
    30_000,
  );
  first.kill('SIGKILL');
  await first.exited;
  const [row] = await db.sql<
    { future: boolean; due: Date }[]
  >`SELECT next_attempt_at > now() AS future, next_attempt_at AS due FROM message_retry WHERE consumer_name = 'restart'`;
  assert.ok(row!.future, 'killed before the retry was due');
  await new Promise((r) => setTimeout(r, Math.max(0, row!.due.getTime() - Date.now()) + 500));
  assert.equal(
    (await appliedSequences(db.sql, 'restart')).get('k-1'),
    undefined,
    'nothing ran it while no consumer was up',
  );
  const second = consume('restart', topic, { TEST_RETRY: retry });
  try {
    await waitFor(
      'k-1 applied',
      async () => (await appliedSequences(db.sql, 'restart')).get('k-1')?.length === 1,
      30_000,
    );
  } finally {
    await stop(second);
  }
  const [ledger] = await db.sql<{ status: string }[]>`SELECT status FROM message_retry WHERE consumer_name = 'restart'`;
  assert.equal(ledger!.status, 'done');
  const [projection] = await db.sql<
    { applied_count: number }[]
  >`SELECT applied_count FROM demo_order_projection WHERE order_id = 'k-1'`;
  assert.equal(projection!.applied_count, 1);
});

test('a crash after the ledger write and before the job is enqueued loses no retry: reconciliation enqueues it', async () => {
  const topic = uniqueTopic('retry-reconcile');
  await createTopic(topic, 1);
  const flaky = ceRecord({ aggregate_id: 'q-1', version: 1, data: { failAttempts: 1 } });
  await produce(topic, [flaky, ceRecord({ aggregate_id: 'q-1', version: 2 })]);
  const first = consume('reconcile', topic, { POSTBOX_FAILPOINT: 'retry.after-ledger-before-enqueue' });
  const code = await first.exited;
  assert.equal(code, null, `killed by its failpoint: ${first.output().slice(-1000)}`);
  const [row] = await db.sql<
    { attempt: number; due: Date }[]
  >`SELECT attempt, next_attempt_at AS due FROM message_retry WHERE consumer_name = 'reconcile' AND status = 'scheduled'`;
  assert.ok(row, 'the ledger row was committed');
  const scheduler = new BullmqRetryScheduler({ redisUrl: stack.REDIS_URL, consumer: 'reconcile' });
  try {
    assert.equal(
      await scheduler.has({
        consumer: 'reconcile',
        eventId: flaky.headers.ce_id!,
        attempt: row.attempt,
        dueAt: row.due.getTime(),
      }),
      false,
      'no job was enqueued',
    );
  } finally {
    await scheduler.close();
  }
  const second = consume('reconcile', topic);
  try {
    await waitFor(
      'q-1 applied 1, 2',
      async () => (await appliedSequences(db.sql, 'reconcile')).get('q-1')?.length === 2,
      30_000,
    );
  } finally {
    await stop(second);
  }
  const stats = JSON.parse(
    second
      .output()
      .split('\n')
      .find((l) => l.includes('"consumer-stats"'))!,
  )['consumer-stats'];
  assert.equal(stats.retriesReconciled, 1, 'reconciliation enqueued the missing job');
  assert.deepEqual((await appliedSequences(db.sql, 'reconcile')).get('q-1'), [1, 2]);
  const [projection] = await db.sql<
    { applied_count: number }[]
  >`SELECT applied_count FROM demo_order_projection WHERE order_id = 'q-1'`;
  assert.equal(projection!.applied_count, 2);
});
