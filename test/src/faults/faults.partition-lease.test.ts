import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { uniqueTopic } from '../support/kafka.ts';
import { faultBrokerOf, type FaultBroker } from '../support/fault-broker.ts';
import { createNetns, type Netns } from '../support/netns.ts';
import { alive, Pipeline, recordScenario, stopGracefully } from '../support/pipeline.ts';
import { startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import { waitFor, type RoleProcess } from '../support/processes.ts';

// On NATS JetStream and RabbitMQ the broker has no group of its own: which member reads which partition is a lease in
// PostgreSQL (consumer/partition-leases.ts). A member cut from PostgreSQL — the broker still reachable, so it
// could go on reading — must stop reading its partitions before another member can take them: it gives them up
// at two thirds of its lease, the others take them only once the lease has run out. The order of the two members'
// assignment lines, as they arrive, is the proof; the verifier has the last word (nothing applied twice).

const PARTITIONS = 4;
const LEASE_MS = 6000;
// NATS and RabbitMQ in `npm run test:faults` only (the suite's budget).
const BROKERS: Array<'nats' | 'rabbitmq'> = process.env.POSTBOX_FAULT_FULL === '1' ? ['nats', 'rabbitmq'] : [];

let netns: Netns;
let stack: PrivateStack | null = null;
let broker: FaultBroker;
let db: TestDatabase | null = null;
let pipeline: Pipeline | null = null;

before(async () => {
  if (BROKERS.length === 0) return;
  netns = await createNetns(['w', 'r', 'c1', 'c2']);
});

async function release(): Promise<void> {
  await pipeline?.stopAll();
  pipeline = null;
  await db?.drop().catch(() => {});
  db = null;
  await stack?.stop();
  stack = null;
}

after(async () => {
  await release();
  await netns?.destroy();
});

/** Each 'consumer assignment' line of a process with the time it arrived here. */
function assignments(p: RoleProcess): Array<{ at: number; assigned: string[] }> {
  const seen: Array<{ at: number; assigned: string[] }> = [];
  let partial = '';
  p.child.stdout!.on('data', (d: Buffer) => {
    const lines = (partial + d.toString()).split('\n');
    partial = lines.pop()!;
    for (const line of lines) {
      if (!line.includes('consumer assignment')) continue;
      seen.push({ at: Date.now(), assigned: (JSON.parse(line) as { assigned: string[] }).assigned });
    }
  });
  return seen;
}

for (const kind of BROKERS)
  test(`${kind}: a consumer cut from PostgreSQL (its leases) but not from the broker stops reading before another member takes its partitions; nothing applied twice`, {
    timeout: 400_000,
  }, async () => {
    await release();
    stack = await startPrivateStack({ host: netns.host, postgres: {}, redis: true, [kind]: true });
    broker = faultBrokerOf(stack, kind);
    db = await freshDatabase('pbpl', stack.urls.DATABASE_URL!);
    const topic = uniqueTopic(`pl${kind}`);
    const consumer = `pl${topic.slice(-6)}`;
    await broker.createTopic(topic, PARTITIONS, [`postbox.${consumer}`]);
    const p = (pipeline = new Pipeline({
      databaseUrl: db.url,
      broker,
      redisUrl: stack.urls.REDIS_URL!,
      topic,
      partitions: PARTITIONS,
      consumer,
      // The test bridge is a private network with no route out: passwords cross it in clear.
      env: { POSTBOX_ALLOW_INSECURE: 'postgres,rabbitmq', POSTBOX_PARTITION_LEASE_MS: String(LEASE_MS) },
    }));
    await p.setup(20);
    const writer = p.writer({ WRITER_RATE: '40', WRITER_AGGREGATES: '60' }, netns.name('w'));
    const relay = p.relay({}, netns.name('r'));
    const c1 = p.consumer({ LOG_LEVEL: 'info' }, netns.name('c1'));
    const c1Lines = assignments(c1);
    await waitFor('c1 to hold partitions', async () => (c1Lines.at(-1)?.assigned.length ?? 0) > 0, 60_000);
    const c2 = p.consumer({ LOG_LEVEL: 'info' }, netns.name('c2'));
    const c2Lines = assignments(c2);
    await waitFor(
      'the partitions shared by both',
      async () => (c1Lines.at(-1)?.assigned.length ?? 0) > 0 && (c2Lines.at(-1)?.assigned.length ?? 0) > 0,
      60_000,
    );
    await sleep(3000);
    const held = c1Lines.at(-1)!.assigned;
    const cutAt = Date.now();
    await netns.cut('c1', [Number(new URL(db.url).port)], 'drop');
    try {
      await waitFor(
        'c2 to take every partition c1 held',
        async () => held.every((k) => c2Lines.at(-1)?.assigned.includes(k)),
        LEASE_MS * 4,
        100,
      );
      await sleep(3000);
      assert.ok(alive(c1) && alive(c2), 'both consumers live on through the cut');
    } finally {
      await netns.heal('c1');
    }
    for (const k of held) {
      const dropped = c1Lines.find((l) => l.at >= cutAt && !l.assigned.includes(k));
      const taken = c2Lines.find((l) => l.at >= cutAt && l.assigned.includes(k));
      assert.ok(dropped, `c1 never gave up ${k} while cut from its leases`);
      assert.ok(taken, `c2 never took ${k}`);
      assert.ok(
        dropped.at <= taken.at,
        `${k}: c2 took it ${taken.at - cutAt} ms after the cut, c1 stopped reading it only at ${dropped.at - cutAt} ms`,
      );
      console.log(
        `# ${k}: c1 stopped reading ${dropped.at - cutAt} ms after the cut, c2 took it at ${taken.at - cutAt} ms`,
      );
    }
    await sleep(3000);
    await stopGracefully(writer, 'writer', 'writer started');
    const report = await p.settle(180_000);
    assert.ok(alive(relay) && alive(c1) && alive(c2), 'every role lives on after the heal');
    recordScenario({ scenario: `partition.${kind}-lease`, iterations: held.length, report });
  });
