import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { newEventId } from '@postbox/engine';
import { BullmqRetryScheduler } from '@postbox/engine/bullmq';
import { restart, startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import { waitFor } from '../support/processes.ts';

// The retry scheduler with Redis away: killed (connections refused while ioredis reconnects) or stopped (SIGSTOP:
// connected, nothing answers, as on a silent partition). Every call must fail by its deadline with an error that
// names Redis — a replay, a consumer's retry or reconciliation must never wait for ever on the alarm clock (the
// ledger keeps the truth, reconciliation re-enqueues once Redis is back). Found by the mixed-fault soak: a
// `postbox failures replay` that began while Redis was down was still waiting 18 minutes later.

const DEADLINE_MS = 2000;
let stack: PrivateStack;
const schedulers: BullmqRetryScheduler[] = [];

before(async () => {
  stack = await startPrivateStack({ redis: true });
});

after(async () => {
  await stack.redis!.signal('SIGCONT').catch(() => 0);
  for (const s of schedulers) await s.close().catch(() => {});
  await stack?.stop();
});

const job = () => ({ consumer: 'c-away', eventId: newEventId(), attempt: 1, dueAt: Date.now() + 60_000 });

async function failsByDeadline(what: string, call: () => Promise<unknown>): Promise<void> {
  const started = Date.now();
  await assert.rejects(call(), (e: Error) => {
    assert.match(e.message, /Redis/, `${what}: the error names Redis: ${e.message}`);
    return true;
  });
  const took = Date.now() - started;
  assert.ok(took < DEADLINE_MS + 3000, `${what} failed after ${took} ms, not by its deadline (${DEADLINE_MS} ms)`);
}

test('Redis killed: schedule, ensure and has fail by their deadline, naming Redis; the scheduler works again once Redis is back', {
  timeout: 120_000,
}, async () => {
  const scheduler = new BullmqRetryScheduler({
    redisUrl: stack.urls.REDIS_URL!,
    consumer: 'c-away',
    commandTimeoutMs: DEADLINE_MS,
  });
  schedulers.push(scheduler);
  await scheduler.schedule(job());
  await stack.redis!.signal('SIGKILL');
  await stack.redis!.waitForExit();
  await failsByDeadline('schedule', () => scheduler.schedule(job()));
  await failsByDeadline('ensure', () => scheduler.ensure(job()));
  await failsByDeadline('has', () => scheduler.has(job()));
  await restart(stack.redis!);
  const back = job();
  // ioredis reconnects on its own backoff: the first call after the restart may still find it away.
  await waitFor(
    'the scheduler back with Redis',
    () =>
      scheduler.schedule(back).then(
        () => true,
        () => false,
      ),
    15_000,
  );
  assert.equal(await scheduler.has(back), true, 'scheduled again once Redis is back');
});

test('Redis already down when the scheduler starts (an operator runs a replay while Redis is away): schedule fails by its deadline', {
  timeout: 60_000,
}, async () => {
  if ((await stack.redis!.pid()) !== undefined) await stack.redis!.signal('SIGKILL');
  await stack.redis!.waitForExit();
  try {
    const scheduler = new BullmqRetryScheduler({
      redisUrl: stack.urls.REDIS_URL!,
      consumer: 'c-away',
      commandTimeoutMs: DEADLINE_MS,
    });
    schedulers.push(scheduler);
    await failsByDeadline('schedule', () => scheduler.schedule(job()));
    await failsByDeadline('ensure', () => scheduler.ensure(job()));
  } finally {
    await restart(stack.redis!);
  }
});

test('Redis stopped (connected, nothing answers): schedule fails by its deadline', { timeout: 120_000 }, async () => {
  const scheduler = new BullmqRetryScheduler({
    redisUrl: stack.urls.REDIS_URL!,
    consumer: 'c-away',
    commandTimeoutMs: DEADLINE_MS,
  });
  schedulers.push(scheduler);
  await scheduler.schedule(job());
  await stack.redis!.signal('SIGSTOP');
  try {
    await failsByDeadline('schedule', () => scheduler.schedule(job()));
    await failsByDeadline('has', () => scheduler.has(job()));
  } finally {
    await stack.redis!.signal('SIGCONT');
  }
});
