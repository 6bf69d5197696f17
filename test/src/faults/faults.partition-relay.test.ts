import { after, afterEach, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { dumpTopic, type StoredRecord } from '../support/log-dump.ts';
import type { CutMode } from '../support/netns.ts';
import { assertAlive, PartitionLab } from '../support/partition-lab.ts';
import { recordScenario, stopGracefully, type Pipeline } from '../support/pipeline.ts';
import { waitFor } from '../support/processes.ts';

// A relay partitioned from one of its two services while it lives on (a zombie), each role in its own network
// namespace and the cut a firewall rule in the relay's namespace: the writer, the consumer and the other relay
// keep their links. Every scenario ends with the verifier's final check after a drain.
//
// Which promise holds when a relay loses PostgreSQL while its batch is out: the old owner never publishes after
// the new one. Its publish is bounded by half the batch lease (publishWithin), and a relay taking the lane over
// waits until that lease has ended (takeover fence), so whatever the zombie still gets onto the log lands before
// the new owner's first record. The proof is the log itself: the producer id of each stored batch says which
// relay wrote it (support/log-dump.ts).

const FULL = process.env.POSTBOX_FAULT_FULL === '1';
const PARTITIONS = 3;

let lab: PartitionLab;

before(async () => {
  lab = await PartitionLab.start(['w', 'r1', 'r2', 'c'], 'pbpr');
});

afterEach(() => lab.endScenario());

after(() => lab?.stop());

const pipelineFor = (name: string) => lab.pipeline(name, { partitions: PARTITIONS });

/** Lanes whose batch the relay with this pid has out (claimed, its sending lease running). */
async function claimedBy(p: Pipeline, pid: number): Promise<number> {
  const [r] = await p.sql<{ n: number }[]>`
    SELECT count(*)::int AS n FROM relay_lane_inflight
    WHERE owner LIKE ${`%-${pid}-%`} AND sending_until > now()`;
  return r!.n;
}

/**
 * Records written after `from` by a producer that had not written before it (the new owner), and the zombie's:
 * producers seen before `from` (only r1 ran then). Per partition, no zombie record may follow the new owner's
 * first one. Returns the counts, for the scenario's line.
 */
function assertZombieFirst(records: StoredRecord[], from: number, until: number): { zombie: number; owner: number } {
  const old = new Set(records.filter((r) => r.createdAt < from).map((r) => r.producerId));
  let zombie = 0;
  let owner = 0;
  for (let p = 0; p < PARTITIONS; p++) {
    const window = records.filter((r) => r.partition === p && r.createdAt >= from && r.createdAt < until);
    const firstNew = window.find((r) => !old.has(r.producerId));
    for (const r of window) {
      if (old.has(r.producerId)) zombie++;
      else owner++;
      if (firstNew && old.has(r.producerId))
        assert.ok(
          r.offset < firstNew.offset,
          `partition ${p}: the old relay (producer ${r.producerId}) wrote offset ${r.offset} after the new owner's first record at ${firstNew.offset} (producer ${firstNew.producerId})`,
        );
    }
  }
  return { zombie, owner };
}

/**
 * `brokerBack`: when r1 reaches the broker again — at once (its publish may complete at any moment while the lane
 * changes hands), or only once the new owner has published through its lanes (a request r1 sent into the cut
 * would now arrive late, behind the new owner's records, unless r1 gave it up).
 */
const CASES: Array<{ mode: CutMode; brokerBack: 'at-once' | 'after-takeover' }> = FULL
  ? [
      { mode: 'drop', brokerBack: 'at-once' },
      { mode: 'drop', brokerBack: 'after-takeover' },
      { mode: 'reset', brokerBack: 'at-once' },
      { mode: 'reset', brokerBack: 'after-takeover' },
    ]
  : [{ mode: 'drop', brokerBack: 'after-takeover' }];

for (const { mode, brokerBack } of CASES)
  test(`relay cut from PostgreSQL (${mode}) while its batch is out, broker back ${brokerBack}: the new owner takes the lanes, the zombie never publishes after it`, {
    timeout: 300_000,
  }, async () => {
    const p = await pipelineFor(`prpg${mode[0]}${brokerBack[0]}`);
    const pgPort = lab.port('postgres');
    const kafkaPort = lab.port('kafka');
    const writer = p.writer({ WRITER_RATE: '40', WRITER_AGGREGATES: '40' }, lab.netns.name('w'));
    const r1 = p.relay({ POSTBOX_RELAY_THREADS: '1' }, lab.netns.name('r1'));
    const consumer = p.consumer({}, lab.netns.name('c'));
    await sleep(8000);
    assertAlive([writer, r1, consumer], 'before the cut');
    // The broker cut first, so that r1 surely has a batch out whose publish hangs; then PostgreSQL: r1 can no
    // longer settle, renew or claim anything, while its sent request may still reach the broker.
    await lab.netns.cut('r1', [kafkaPort], 'drop');
    const from = Date.now();
    const r2 = p.relay({ POSTBOX_RELAY_THREADS: '1' }, lab.netns.name('r2'));
    await waitFor('r1 to have a batch out', async () => (await claimedBy(p, r1.child.pid!)) > 0, 30_000, 50).catch(
      async (cause) => {
        const lanes = await p.sql`SELECT * FROM relay_lane_inflight f JOIN relay_lane l USING (lane)`;
        throw new Error(`${(cause as Error).message}\n${JSON.stringify(lanes)}\n${r1.output().slice(-3000)}`, {
          cause,
        });
      },
    );
    await lab.netns.cut('r1', [pgPort], mode);
    if (brokerBack === 'at-once') await lab.netns.uncut('r1', [kafkaPort], 'drop');
    await waitFor(
      'r2 to hold every lane r1 had',
      async () => {
        const [r] = await p.sql<{ n: number }[]>`
          SELECT count(*)::int AS n FROM relay_lane WHERE owner LIKE ${`%-${r1.child.pid}-%`} AND lease_until > now()`;
        return r!.n === 0;
      },
      30_000,
      250,
    );
    await sleep(10_000);
    if (brokerBack === 'after-takeover') {
      await lab.netns.uncut('r1', [kafkaPort], 'drop');
      // TCP retransmits what r1 had queued within seconds once the path is back.
      await sleep(10_000);
    }
    assertAlive([writer, r1, r2, consumer], 'while r1 was cut off');
    const until = Date.now();
    await lab.netns.heal('r1');
    await sleep(5000);
    await stopGracefully(writer, 'writer', 'writer started');
    const report = await p.settle(180_000);
    assertAlive([r1, r2, consumer], 'after the heal');
    const counts = assertZombieFirst(await dumpTopic(lab.stack.kafka!.dataDir, p.o.topic, PARTITIONS), from, until);
    assert.ok(counts.owner > 0, 'the new owner published while r1 was cut off');
    recordScenario({ scenario: `partition.relay-postgres-${mode}-broker-${brokerBack}`, iterations: 1, report });
    console.log(`# zombie records after the cut: ${counts.zombie}, the new owner's: ${counts.owner}`);
  });

// The full level only (npm run test:faults): faults.partition-oneway's relay → Kafka cell covers unknown outcomes in
// `npm test`.
if (FULL)
  test('relay cut from the broker (silent), PostgreSQL reachable: sends of unknown outcome go back with the same ids, nothing lost', {
    timeout: 300_000,
  }, async () => {
    const p = await pipelineFor('prkd');
    const kafkaPort = lab.port('kafka');
    const writer = p.writer({ WRITER_RATE: '40', WRITER_AGGREGATES: '40' }, lab.netns.name('w'));
    const r1 = p.relay({ POSTBOX_RELAY_THREADS: '1' }, lab.netns.name('r1'));
    const consumer = p.consumer({}, lab.netns.name('c'));
    await sleep(8000);
    await lab.netns.cut('r1', [kafkaPort], 'drop');
    await sleep(15_000);
    const [during] = await p.sql<{ pending: number; errors: number }[]>`
    SELECT count(*) FILTER (WHERE status IN ('pending', 'publishing'))::int AS pending,
           count(*) FILTER (WHERE last_error IS NOT NULL)::int AS errors
    FROM message_outbox`;
    assert.ok(during!.pending > 0, 'rows wait while the only relay cannot reach the broker');
    assert.ok(during!.errors > 0, 'sends into the cut came back unknown or failed, and were rescheduled');
    assertAlive([writer, r1, consumer], 'while r1 was cut from the broker');
    await lab.netns.heal('r1');
    await sleep(3000);
    await stopGracefully(writer, 'writer', 'writer started');
    const report = await p.settle(180_000);
    assertAlive([r1, consumer], 'after the heal');
    recordScenario({ scenario: 'partition.relay-broker-drop', iterations: 1, report });
  });
