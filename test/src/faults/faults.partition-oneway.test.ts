import { after, afterEach, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { uniqueTopic } from '../support/kafka.ts';
import { createNetns, type Netns } from '../support/netns.ts';
import { alive, Pipeline, recordScenario, stopGracefully } from '../support/pipeline.ts';
import { createPrivateTopic, startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import type { RoleProcess } from '../support/processes.ts';

// One-way partitions: a role's requests reach the server, which acts on them, and the server's packets back are
// dropped (in the role's namespace) — a commit that happened whose reply never comes, a produce the broker
// appended and never acknowledged, an offset commit stored and unconfirmed. After the heal nothing may be lost,
// applied twice or reordered, and every business transaction exists once. `npm test` runs none (the suite's budget: faults.partition-relay covers
// the relay's unknown outcomes there); `npm run test:faults` the whole matrix.

const FULL = process.env.POSTBOX_FAULT_FULL === '1';
const CUT_MS = 12_000;
type Role = 'w' | 'r' | 'c';
type Service = 'postgres' | 'kafka' | 'redis';
const CELLS: Array<[Role, Service]> = FULL
  ? [
      ['w', 'postgres'],
      ['r', 'postgres'],
      ['r', 'kafka'],
      ['c', 'postgres'],
      ['c', 'kafka'],
      ['c', 'redis'],
    ]
  : [];
const NAMES: Record<Role, string> = { w: 'writer', r: 'relay', c: 'consumer' };

let netns: Netns;
let stack: PrivateStack;
let db: TestDatabase;
const pipelines: Pipeline[] = [];

before(async () => {
  if (CELLS.length === 0) return;
  netns = await createNetns(['w', 'r', 'c']);
  stack = await startPrivateStack({ host: netns.host, postgres: {}, redis: true, kafka: {} });
  db = await freshDatabase('pbpo', stack.urls.DATABASE_URL!);
});

// Each scenario's processes end with it: relays left running would hold the next scenario's lanes.
afterEach(async () => {
  for (const p of pipelines.splice(0)) await p.stopAll();
});

after(async () => {
  for (const p of pipelines) await p.stopAll();
  await db?.drop().catch(() => {});
  await stack?.stop();
  await netns?.destroy();
});

function portOf(service: Service): number {
  if (service === 'postgres') return Number(new URL(db.url).port);
  if (service === 'redis') return Number(new URL(stack.urls.REDIS_URL!).port);
  return Number(stack.urls.KAFKA_BROKERS!.split(':').at(-1));
}

function assertAlive(roles: RoleProcess[], when: string): void {
  for (const r of roles)
    assert.ok(alive(r), `${r.child.spawnargs.slice(4).join(' ')} died ${when}:\n${r.output().slice(-3000)}`);
}

for (const [role, service] of CELLS)
  test(`one-way partition ${NAMES[role]} → ${service} for ${CUT_MS / 1000} s (requests arrive, replies lost): nothing lost or doubled, every transaction once`, {
    timeout: 300_000,
  }, async () => {
    const topic = uniqueTopic(`po${role}${service[0]}`);
    await createPrivateTopic(stack, topic, 3);
    const p = new Pipeline({
      databaseUrl: db.url,
      kafkaBrokers: stack.urls.KAFKA_BROKERS!,
      redisUrl: stack.urls.REDIS_URL!,
      topic,
      partitions: 3,
      consumer: `po${role}${service[0]}${topic.slice(-6)}`,
      // The test bridge is a private network with no route out; PostgreSQL's password crosses it in clear.
      env: { POSTBOX_ALLOW_INSECURE: 'postgres' },
    });
    pipelines.push(p);
    await p.setup();
    const roles = [
      p.writer({ WRITER_RATE: '40', WRITER_AGGREGATES: '40', WRITER_FLAKY: '0.03' }, netns.name('w')),
      p.relay({}, netns.name('r')),
      p.consumer({}, netns.name('c')),
    ];
    await sleep(6000);
    await netns.cut(role, [portOf(service)], 'oneway');
    try {
      await sleep(CUT_MS);
      assertAlive(roles, `during the one-way cut of ${NAMES[role]} → ${service}`);
    } finally {
      await netns.heal(role);
    }
    await sleep(4000);
    await stopGracefully(roles[0]!, 'writer', 'writer started');
    const report = await p.settle(180_000);
    assertAlive(roles.slice(1), 'after the heal');
    // Each business transaction once: an aggregate's version counts its events, none written twice.
    const [mismatch] = await p.sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM fault_aggregate a
      WHERE a.id LIKE ${`${p.o.consumer}-%`}
        AND a.version <> (SELECT count(*) FROM message_outbox o WHERE o.aggregate_id = a.id)`;
    assert.equal(mismatch!.n, 0, 'aggregates whose version does not count their events');
    recordScenario({ scenario: `partition.oneway-${NAMES[role]}-${service}`, iterations: 1, report });
  });
