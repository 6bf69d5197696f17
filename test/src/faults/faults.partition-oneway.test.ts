import { after, afterEach, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { assertAlive, PartitionLab } from '../support/partition-lab.ts';
import { recordScenario, stopGracefully } from '../support/pipeline.ts';

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

let lab: PartitionLab | null = null;

before(async () => {
  if (CELLS.length > 0) lab = await PartitionLab.start(['w', 'r', 'c'], 'pbpo');
});

afterEach(() => lab?.endScenario());

after(() => lab?.stop());

for (const [role, service] of CELLS)
  test(`one-way partition ${NAMES[role]} → ${service} for ${CUT_MS / 1000} s (requests arrive, replies lost): nothing lost or doubled, every transaction once`, {
    timeout: 300_000,
  }, async () => {
    const { netns } = lab!;
    const p = await lab!.pipeline(`po${role}${service[0]}`, { partitions: 3 });
    const roles = [
      p.writer({ WRITER_RATE: '40', WRITER_AGGREGATES: '40', WRITER_FLAKY: '0.03' }, netns.name('w')),
      p.relay({}, netns.name('r')),
      p.consumer({}, netns.name('c')),
    ];
    await sleep(6000);
    await netns.cut(role, [lab!.port(service)], 'oneway');
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
