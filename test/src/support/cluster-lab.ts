import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { privateKafkaCluster, type PrivateKafkaCluster } from '@postbox/stack';
import { freshDatabase, type TestDatabase } from './database.ts';
import { createTopic, uniqueTopic } from './kafka.ts';
import { createNetns, type Netns } from './netns.ts';
import { alive, Pipeline, recordScenario, stopGracefully } from './pipeline.ts';
import { waitFor, type RoleProcess } from './processes.ts';
import { stack as shared } from './stack.ts';

/** A killed leader is fenced only after broker.session.timeout.ms (9 s): a lease shorter than that re-sends. */
const RELAY_LEASE_MS = '20000';

/**
 * The setting of the cluster fault scenarios: a private three-node KRaft cluster whose node i runs in a network
 * namespace of its own (role `k<i>`, netns.ts), listening and advertised on that namespace's address — so a rule
 * inside one namespace cuts that node from its peers while the test and the pipeline's roles (this namespace,
 * over the bridge) still reach every node. PostgreSQL (a fresh database) and Redis are the shared stack's, on
 * loopback. Every node's pid is remembered: should the test process die, no JVM outlives it.
 */
export class ClusterLab {
  readonly netns: Netns;
  readonly cluster: PrivateKafkaCluster;
  readonly db: TestDatabase;
  readonly #home: string;
  readonly #pipelines = new Set<Pipeline>();

  private constructor(netns: Netns, cluster: PrivateKafkaCluster, db: TestDatabase, home: string) {
    this.netns = netns;
    this.cluster = cluster;
    this.db = db;
    this.#home = home;
  }

  static async start(dbPrefix: string): Promise<ClusterLab> {
    const home = path.join(os.tmpdir(), `postbox-cluster-${randomBytes(4).toString('hex')}`);
    const roles = [1, 2, 3].map(role);
    const netns = await createNetns(roles);
    let cluster: PrivateKafkaCluster | undefined;
    // Created beside the cluster's start; dropped below should the start fail (and never left unhandled).
    let database: Promise<TestDatabase> | undefined;
    try {
      cluster = await privateKafkaCluster(home, 3, {
        hosts: roles.map((r) => ({ address: netns.address(r), netns: netns.name(r) })),
      });
      database = freshDatabase(dbPrefix);
      database.catch(() => {});
      try {
        await cluster.start();
      } finally {
        await track(cluster);
      }
      return new ClusterLab(netns, cluster, await database, home);
    } catch (cause) {
      await database?.then((d) => d.drop()).catch(() => {});
      await cluster?.stop().catch(() => {});
      await netns.destroy().catch(() => {});
      await fs.rm(home, { recursive: true, force: true });
      throw cause;
    }
  }

  /** The namespace role of node `id`. */
  role(id: number): string {
    return role(id);
  }

  /** Node `id`'s address on the bridge. */
  address(id: number): string {
    return this.netns.address(role(id));
  }

  /** KAFKA_BROKERS of the nodes `ids` alone. */
  brokersOf(ids: number[]): string {
    const all = this.cluster.url.split(',');
    return ids.map((id) => all[id - 1]!).join(',');
  }

  async restartNode(id: number): Promise<void> {
    await this.cluster.node(id).restart();
    await track(this.cluster);
    await this.cluster.waitForBrokers();
  }

  /** A writer (30/s over 60 aggregates), a relay and a consumer on a new 3-partition topic, 100 events applied. */
  async pipelineFor(name: string): Promise<{ p: Pipeline; roles: RoleProcess[]; topic: string }> {
    const topic = uniqueTopic(name);
    await createTopic(topic, 3, {}, { brokers: this.cluster.url });
    const p = new Pipeline({
      databaseUrl: this.db.url,
      kafkaBrokers: this.cluster.url,
      redisUrl: shared.REDIS_URL,
      topic,
      partitions: 3,
      consumer: `${name}${topic.slice(-6)}`,
      env: { POSTBOX_RELAY_LEASE_MS: RELAY_LEASE_MS },
    });
    this.#pipelines.add(p);
    await p.setup();
    const roles = [
      p.writer({ WRITER_RATE: '30', WRITER_AGGREGATES: '60' }),
      p.relay({ POSTBOX_RELAY_THREADS: '1' }),
      p.consumer(),
    ];
    await waitFor('events applied before the fault', async () => (await applied(p)) >= 100, 90_000, 500);
    return { p, roles, topic };
  }

  /**
   * Stops the writer, waits for everything committed to settle, asserts the verifier's counts (nothing lost,
   * applied twice or reordered; every published row's event at its stored position), runs `settled` (more checks
   * on the settled pipeline), prints the line.
   */
  async finish(
    p: Pipeline,
    roles: RoleProcess[],
    scenario: string,
    stuckAfterMs: number,
    settled?: () => Promise<void>,
  ): Promise<void> {
    await stopGracefully(roles[0]!, 'writer', 'writer started');
    const report = await p.settle(240_000, { stuckAfterMs });
    assertAlive(roles.slice(1), `in ${scenario}`);
    const c = report.consumers[0]!;
    assert.equal(report.log.lostWrites.count, 0, 'every published row holds its event at its stored position');
    assert.equal(report.log.positionConflicts.count, 0);
    assert.equal(c.lost.count, 0);
    assert.equal(c.appliedTwice!.count, 0);
    assert.equal(c.outOfOrder.count, 0);
    assert.equal(report.log.byStatus.failed ?? 0, 0, 'no row given up by the relay');
    await settled?.();
    recordScenario({ scenario, iterations: 1, report });
    this.#pipelines.delete(p);
    await p.stopAll();
  }

  /** A scenario that failed half-way leaves its roles running: they must not load the next one. */
  async endScenario(): Promise<void> {
    for (const p of this.#pipelines) await p.stopAll();
    this.#pipelines.clear();
  }

  /** Every part is stopped, even when one before it fails to (the first failure is thrown after). */
  async stop(): Promise<void> {
    const failures: unknown[] = [];
    for (const step of [
      () => this.endScenario(),
      () => this.cluster.stop(),
      // Also kills whatever still runs in the namespaces (a node whose pid file was never written).
      () => this.netns.destroy(),
      () => fs.rm(this.#home, { recursive: true, force: true }),
      () => this.db.drop(),
    ])
      await step().catch((e: unknown) => void failures.push(e));
    if (failures.length > 0) throw failures[0];
  }
}

function role(id: number): string {
  return `k${id}`;
}

const pids = new Set<number>();

// Should this process die before stop() runs, no node outlives it. A pid is killed only while it is still a
// Kafka node's: a node killed and restarted left its old pid here, and the system may have handed it on.
process.on('exit', () => {
  for (const pid of pids) {
    try {
      if (readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('kafka.Kafka')) process.kill(pid, 'SIGKILL');
    } catch {
      // gone already
    }
  }
});

async function track(cluster: PrivateKafkaCluster): Promise<void> {
  for (const n of cluster.nodes) {
    const pid = await n.pid();
    if (pid !== undefined) pids.add(pid);
  }
}

export async function applied(p: Pipeline): Promise<number> {
  const [r] = await p.sql<
    { n: number }[]
  >`SELECT count(*)::int AS n FROM test_applied WHERE consumer = ${p.o.consumer}`;
  return r!.n;
}

export async function published(p: Pipeline): Promise<number> {
  const [r] = await p.sql<{ n: number }[]>`
    SELECT count(*)::int AS n FROM message_outbox WHERE topic = ${p.o.topic} AND status = 'published'`;
  return r!.n;
}

export function assertAlive(roles: RoleProcess[], when: string): void {
  for (const r of roles)
    assert.ok(alive(r), `${r.child.spawnargs.slice(2).join(' ')} died ${when}:\n${r.output().slice(-3000)}`);
}

/** CPU seconds (user + system) a process used so far, from /proc/<pid>/stat. */
export function cpuSeconds(p: RoleProcess): number {
  const fields = readFileSync(`/proc/${p.child.pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}
