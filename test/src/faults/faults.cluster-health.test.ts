import type { TopicReplicaHealth } from '@postbox/engine/control';
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { startTelemetry, type Telemetry } from '@postbox/api';
import { silentLogger } from '@postbox/engine';
import { freePort, privateKafkaCluster, type PrivateKafkaCluster } from '@postbox/stack';
import { startTestApi, type TestApi } from '../support/api.ts';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { waitFor } from '../support/processes.ts';
import { stack } from '../support/stack.ts';

// The broker side of the seed's §17 on a private three-node KRaft cluster (RF 3, min.insync.replicas=2): the
// control plane's broker-health probe, as GraphQL `brokerHealth`, the Prometheus gauges and `postbox status` show
// it, while nodes are SIGKILLed and come back. Healthy → one node down (under-replicated, min ISR 2 once the
// controller moved the leaders, publishing still possible) → two down (the controller quorum is lost too, the
// survivor's metadata stays stale: the probe's own connection to each node is what flags the stall) → both back.

// The full level only (npm run test:faults): npm test's budget.
const FULL = process.env.POSTBOX_FAULT_FULL === '1';
const PARTITIONS = 3;
const CLI = fileURLToPath(new URL('../../../packages/api/src/bin/postbox.ts', import.meta.url));

let cluster: PrivateKafkaCluster;
let db: TestDatabase;
let api: TestApi;
let telemetry: Telemetry;
let metricsPort: number;
const topic = uniqueTopic('health');
const home = path.join(os.tmpdir(), `postbox-cluster-health-${randomBytes(4).toString('hex')}`);
const pids = new Set<number>();

// Should this process die before after() runs, no node outlives it.
process.on('exit', () => {
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone already
    }
  }
});

async function track(): Promise<void> {
  for (const n of cluster.nodes) {
    const pid = await n.pid();
    if (pid !== undefined) pids.add(pid);
  }
}

before(async () => {
  if (!FULL) return;
  const started = Date.now();
  metricsPort = await freePort();
  telemetry = await startTelemetry('test', {
    env: { POSTBOX_METRICS_PORT: String(metricsPort), POSTBOX_METRICS_HOST: '127.0.0.1' },
    log: silentLogger,
  });
  cluster = await privateKafkaCluster(home, 3);
  const database = freshDatabase('pbh');
  try {
    await cluster.start();
  } finally {
    await track();
  }
  db = await database;
  await createTopic(topic, PARTITIONS, {}, { brokers: cluster.url });
  api = await startTestApi(db.url, { kafkaBrokers: cluster.url, topics: `${topic}:${PARTITIONS}` });
  console.log(`# cluster health: 3 nodes live in ${((Date.now() - started) / 1000).toFixed(1)} s`);
});

after(async () => {
  await api?.close();
  await telemetry?.shutdown();
  await cluster?.stop();
  await fs.rm(home, { recursive: true, force: true });
  await db?.drop();
});

/** A topic's row as GraphQL returns it: the port's shape. */
type TopicHealth = TopicReplicaHealth;
interface Health {
  ok: boolean;
  error: string | null;
  brokers: Array<{ id: number; reachable: boolean }>;
  topics: TopicHealth[];
}

/** brokerHealth as a viewer reads it (the field's scope). */
async function health(): Promise<{ report: Health; t: TopicHealth | undefined }> {
  const res = await api.gql<{ brokerHealth: Health }>(
    `{ brokerHealth { ok error brokers { id reachable } topics { topic partitions replicationFactor minInsyncReplicas
       underReplicated offline belowMinInsync minIsr error } } }`,
    {},
    api.tokens.viewer,
  );
  assert.equal(res.errors, undefined, JSON.stringify(res.errors));
  const report = res.data!.brokerHealth;
  return { report, t: report.topics.find((x) => x.topic === topic) };
}

/**
 * Waits until a probe that answered and read the topic satisfies `want`; the last report is in the failure's
 * message. A probe that failed once (a node just killed) is a state to wait past, not the verdict.
 */
async function healthWhen(what: string, want: (h: { report: Health; t: TopicHealth }) => boolean, timeoutMs = 45_000) {
  let last: unknown;
  try {
    return await waitFor(
      what,
      async () => {
        const { report, t } = await health();
        last = t ?? report;
        if (!report.ok || !t) return undefined;
        return want({ report, t }) ? { report, t } : undefined;
      },
      timeoutMs,
      500,
    );
  } catch (cause) {
    throw new Error(`${(cause as Error).message}; last: ${JSON.stringify(last)}`, { cause });
  }
}

/** The broker gauges of the topic (and the cluster-wide ones), as Prometheus scrapes them. */
async function gauges(): Promise<Record<string, number | undefined>> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const read = (metric: string, ofTopic = true) => {
    for (const line of text.split('\n')) {
      const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
      if (m?.[1] !== metric) continue;
      if (ofTopic && !(m[2] ?? '').includes(`messaging_destination_name="${topic}"`)) continue;
      return Number(m[3]);
    }
    return undefined;
  };
  return {
    up: read('postbox_broker_up', false),
    unreachable: read('postbox_broker_nodes_unreachable', false),
    underReplicated: read('postbox_broker_partitions_under_replicated'),
    offline: read('postbox_broker_partitions_offline'),
    belowMinInsync: read('postbox_broker_partitions_below_min_insync'),
    minIsr: read('postbox_broker_isr_min'),
    minInsync: read('postbox_broker_min_insync_replicas'),
  };
}

/** `postbox status` against the cluster: its exit code and output. */
async function status(): Promise<{ code: number; out: string }> {
  const env = {
    ...process.env,
    DATABASE_URL: db.url,
    REDIS_URL: stack.REDIS_URL,
    KAFKA_BROKERS: cluster.url,
    POSTBOX_BROKER: 'kafka',
    POSTBOX_TOPICS: `${topic}:${PARTITIONS}`,
  };
  try {
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ['--conditions=@postbox/source', '--disable-warning=TimeoutNegativeWarning', CLI, 'status'],
      { env, timeout: 30_000 },
    );
    return { code: 0, out: stdout };
  } catch (cause) {
    const e = cause as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === 'number' ? e.code : -1, out: `${e.stdout ?? ''}${e.stderr ?? ''}` };
  }
}

if (FULL)
  test('broker health on a 3-node cluster: healthy, one node down, two down (stalled), both back — GraphQL, metrics and postbox status agree', {
    timeout: 300_000,
  }, async () => {
    const started = Date.now();
    const anonymous = await api.gql('{ brokerHealth { ok } }', {}, null);
    assert.equal(anonymous.errors?.[0]?.extensions?.code, 'FORBIDDEN', 'brokerHealth needs the viewer scope');
    const healthy = await healthWhen(
      'every partition in sync on 3 nodes',
      ({ report, t }) =>
        report.brokers.length === 3 && report.brokers.every((b) => b.reachable) && t.minIsr === 3 && t.offline === 0,
    );
    assert.deepEqual(
      { ...healthy.t, topic: undefined },
      {
        topic: undefined,
        partitions: PARTITIONS,
        replicationFactor: 3,
        minInsyncReplicas: 2,
        underReplicated: 0,
        offline: 0,
        belowMinInsync: 0,
        minIsr: 3,
        error: null,
      },
    );
    assert.deepEqual(await gauges(), {
      up: 1,
      unreachable: 0,
      underReplicated: 0,
      offline: 0,
      belowMinInsync: 0,
      minIsr: 3,
      minInsync: 2,
    });

    // One node down: every partition has a copy there (RF 3 on 3 nodes). Its leaders move once its session ends.
    const [first, second] = [1, 2];
    await cluster.node(first).kill('SIGKILL');
    const one = await healthWhen(
      'under-replicated everywhere, min ISR 2, leaders moved, publishing possible',
      ({ t }) => t.underReplicated === PARTITIONS && t.minIsr === 2 && t.offline === 0 && t.belowMinInsync === 0,
    );
    assert.deepEqual(
      one.report.brokers.filter((b) => !b.reachable).map((b) => b.id),
      [first],
    );
    const g1 = await gauges();
    assert.deepEqual([g1.unreachable, g1.underReplicated, g1.minIsr, g1.offline, g1.belowMinInsync], [1, 3, 2, 0, 0]);
    const cli = await status();
    assert.equal(cli.code, 1, `postbox status exits 1 with a node down:\n${cli.out}`);
    assert.match(
      cli.out,
      new RegExp(`${topic.replace('.', '\\.')}\\s+3\\s+3\\s+2\\s+2\\s+3\\s+0\\s+0\\s+UNDER-REPLICATED`),
    );
    console.log(`# cluster health: one node down seen after ${((Date.now() - started) / 1000).toFixed(1)} s`);

    // Two down: the quorum is lost, the survivor's metadata still lists an ISR of 2. What answers says otherwise.
    await cluster.node(second).kill('SIGKILL');
    const two = await healthWhen(
      'every partition below min.insync.replicas (publishing stalled)',
      ({ t }) => t.belowMinInsync === PARTITIONS && t.minIsr <= 1,
      20_000,
    );
    assert.equal(two.t.underReplicated, PARTITIONS);
    const g2 = await gauges();
    assert.equal(g2.unreachable, 2);
    assert.equal(g2.belowMinInsync, PARTITIONS, 'the stall is on the metrics too');
    assert.ok(g2.minIsr! <= 1);

    // Both back: the followers catch up and rejoin the ISR.
    await Promise.all([first, second].map((id) => cluster.node(id).restart()));
    await track();
    await cluster.waitForBrokers();
    await healthWhen(
      'every partition in sync again',
      ({ report, t }) => report.brokers.every((b) => b.reachable) && t.underReplicated === 0 && t.minIsr === 3,
      90_000,
    );
    const g3 = await gauges();
    assert.deepEqual([g3.unreachable, g3.underReplicated, g3.offline, g3.belowMinInsync, g3.minIsr], [0, 0, 0, 0, 3]);
    console.log(`# cluster health: the whole round in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  });
