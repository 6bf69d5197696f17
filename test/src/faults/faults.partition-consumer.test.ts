import { after, afterEach, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { Kafka, logLevel } from 'kafkajs';
import { assertAlive, PartitionLab } from '../support/partition-lab.ts';
import { recordScenario, stopGracefully } from '../support/pipeline.ts';
import { holdsPartitions, waitFor } from '../support/processes.ts';

// A consumer partitioned from one of its two services while it lives on, each role in its own network namespace
// (the cut is a firewall rule in the consumer's namespace). Cut from the broker mid-batch: the group gives its
// partitions to the other member while the zombie's transactions may still commit — the inbox must absorb what
// both apply, and no offset the zombie commits may move a partition back under the new owner. Cut from
// PostgreSQL: it can apply nothing, so no offset may pass its unfinished work (the final verifier: anything an
// offset passed without applying would be lost). A slow handler keeps batches in flight.

const FULL = process.env.POSTBOX_FAULT_FULL === '1';
const PARTITIONS = 3;

let lab: PartitionLab;

before(async () => {
  lab = await PartitionLab.start(['w', 'r', 'c1', 'c2'], 'pbpc');
});

afterEach(async () => {
  for (const w of [...watchers]) await w.halt();
  await lab.endScenario();
});

after(() => lab?.stop());

const pipelineFor = (name: string) =>
  lab.pipeline(name, {
    partitions: PARTITIONS,
    handlerDelayMs: 50,
    env: {
      POSTBOX_KAFKA_SESSION_TIMEOUT_MS: '3000',
      POSTBOX_KAFKA_HEARTBEAT_MS: '500',
      POSTBOX_PARTITION_LEASE_MS: '6000',
    },
  });

/**
 * Polls the group's committed offsets every 200 ms until stopped; throws at the end if any partition's offset ever
 * went back (a zombie's commit over the new owner's). Returns how many polls saw a commit move forward.
 */
function watchOffsets(group: string, topic: string): { stop(): Promise<number> } {
  const admin = new Kafka({
    clientId: 'pbx-offsets',
    brokers: [lab.stack.urls.KAFKA_BROKERS!],
    logLevel: logLevel.NOTHING,
  }).admin();
  const last = new Map<number, bigint>();
  const backwards: string[] = [];
  let advances = 0;
  let running = true;
  const loop = (async () => {
    await admin.connect().catch(() => {});
    while (running) {
      try {
        const [t] = await admin.fetchOffsets({ groupId: group, topics: [topic] });
        for (const { partition, offset } of t!.partitions) {
          if (offset === '-1') continue;
          const now = BigInt(offset);
          const before = last.get(partition);
          if (before !== undefined && now < before) backwards.push(`partition ${partition}: ${before} → ${now}`);
          if (before === undefined || now > before) advances++;
          last.set(partition, now);
        }
      } catch {
        // A poll that failed says nothing about the offsets; the next one reads them.
      }
      await sleep(200);
    }
    await admin.disconnect().catch(() => {});
  })();
  const halt = async () => {
    running = false;
    await loop;
    watchers.delete(watcher);
  };
  const watcher = { halt };
  watchers.add(watcher);
  return {
    async stop() {
      await halt();
      assert.deepEqual(backwards, [], 'a committed offset went back');
      return advances;
    },
  };
}

/** Watchers still polling when a test failed: ended after it, so the file does not hang. */
const watchers = new Set<{ halt(): Promise<void> }>();

test('consumer cut from the broker mid-batch (silent), PostgreSQL reachable: the other member takes its partitions, nothing applied twice, no offset goes back', {
  timeout: 300_000,
}, async () => {
  const p = await pipelineFor('pcbk');
  const kafkaPort = lab.port('kafka');
  const writer = p.writer({ WRITER_RATE: '40', WRITER_AGGREGATES: '60' }, lab.netns.name('w'));
  const relay = p.relay({}, lab.netns.name('r'));
  const c1 = p.consumer({ LOG_LEVEL: 'info' }, lab.netns.name('c1'));
  await waitFor('c1 to hold partitions', async () => holdsPartitions(c1), 60_000);
  const offsets = watchOffsets(`postbox.${p.o.consumer}`, p.o.topic);
  const c2 = p.consumer({ LOG_LEVEL: 'info' }, lab.netns.name('c2'));
  await waitFor('c2 to hold partitions', async () => holdsPartitions(c2), 60_000);
  await sleep(4000);
  await lab.netns.cut('c1', [kafkaPort], 'drop');
  // c1's session (3 s) ends at the broker; c2 is given every partition while c1's last batch may still commit.
  await sleep(15_000);
  assertAlive([writer, relay, c1, c2], 'while c1 was cut from the broker');
  await lab.netns.heal('c1');
  await sleep(5000);
  await stopGracefully(writer, 'writer', 'writer started');
  const report = await p.settle(180_000);
  const advances = await offsets.stop();
  assert.ok(advances > 0, 'the group committed offsets while it was watched');
  assertAlive([relay, c1, c2], 'after the heal');
  recordScenario({ scenario: 'partition.consumer-broker-drop', iterations: 1, report });
});

// The full level only (npm run test:faults).
if (FULL)
  test('consumer cut from PostgreSQL (silent), broker reachable: no offset passes work it could not apply', {
    timeout: 300_000,
  }, async () => {
    const p = await pipelineFor('pcpg');
    const pgPort = lab.port('postgres');
    const writer = p.writer({ WRITER_RATE: '40', WRITER_AGGREGATES: '60' }, lab.netns.name('w'));
    const relay = p.relay({}, lab.netns.name('r'));
    const c1 = p.consumer({ LOG_LEVEL: 'info' }, lab.netns.name('c1'));
    await waitFor('c1 to hold partitions', async () => holdsPartitions(c1), 60_000);
    const offsets = watchOffsets(`postbox.${p.o.consumer}`, p.o.topic);
    const c2 = p.consumer({ LOG_LEVEL: 'info' }, lab.netns.name('c2'));
    await waitFor('c2 to hold partitions', async () => holdsPartitions(c2), 60_000);
    await sleep(4000);
    await lab.netns.cut('c1', [pgPort], 'drop');
    await sleep(15_000);
    assertAlive([writer, relay, c1, c2], 'while c1 was cut from PostgreSQL');
    await lab.netns.heal('c1');
    await sleep(5000);
    await stopGracefully(writer, 'writer', 'writer started');
    const report = await p.settle(180_000);
    await offsets.stop();
    assertAlive([relay, c1, c2], 'after the heal');
    recordScenario({ scenario: 'partition.consumer-postgres-drop', iterations: 1, report });
  });
