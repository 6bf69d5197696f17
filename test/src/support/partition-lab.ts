import assert from 'node:assert/strict';
import { freshDatabase, type TestDatabase } from './database.ts';
import { uniqueTopic } from './kafka.ts';
import { createNetns, type Netns } from './netns.ts';
import { alive, Pipeline } from './pipeline.ts';
import { createPrivateTopic, startPrivateStack, type PrivateStack } from './private-stack.ts';
import type { RoleProcess } from './processes.ts';

/**
 * The setting of a partition scenario file: a namespace per role (netns.ts), PostgreSQL, Redis and Kafka listening
 * on the bridge, one database, and the pipelines of its scenarios — ended after each scenario (`endScenario`, from
 * `afterEach`: a relay left running would hold the next scenario's lanes) and all of it by `stop`.
 */
export class PartitionLab {
  readonly netns: Netns;
  readonly stack: PrivateStack;
  readonly db: TestDatabase;
  readonly #pipelines: Pipeline[] = [];

  private constructor(netns: Netns, stack: PrivateStack, db: TestDatabase) {
    this.netns = netns;
    this.stack = stack;
    this.db = db;
  }

  static async start(roles: string[], dbPrefix: string): Promise<PartitionLab> {
    const netns = await createNetns(roles);
    try {
      const stack = await startPrivateStack({ host: netns.host, postgres: {}, redis: true, kafka: {} });
      return new PartitionLab(netns, stack, await freshDatabase(dbPrefix, stack.urls.DATABASE_URL!));
    } catch (cause) {
      await netns.destroy().catch(() => {});
      throw cause;
    }
  }

  /** The port a role is cut from, per service. */
  port(service: 'postgres' | 'kafka' | 'redis'): number {
    if (service === 'postgres') return Number(new URL(this.db.url).port);
    if (service === 'redis') return Number(new URL(this.stack.urls.REDIS_URL!).port);
    return Number(this.stack.urls.KAFKA_BROKERS!.split(':').at(-1));
  }

  /** A pipeline on a topic of its own (`partitions` partitions), its tables made. */
  async pipeline(
    name: string,
    o: { partitions: number; env?: Record<string, string>; handlerDelayMs?: number },
  ): Promise<Pipeline> {
    const topic = uniqueTopic(name);
    await createPrivateTopic(this.stack, topic, o.partitions);
    const p = new Pipeline({
      databaseUrl: this.db.url,
      kafkaBrokers: this.stack.urls.KAFKA_BROKERS!,
      redisUrl: this.stack.urls.REDIS_URL!,
      topic,
      partitions: o.partitions,
      consumer: `${name}${topic.slice(-6)}`,
      // The test bridge is a private network with no route out; PostgreSQL's password crosses it in clear.
      env: { POSTBOX_ALLOW_INSECURE: 'postgres', ...o.env },
    });
    this.#pipelines.push(p);
    await p.setup(o.handlerDelayMs);
    return p;
  }

  async endScenario(): Promise<void> {
    for (const p of this.#pipelines.splice(0)) await p.stopAll();
  }

  async stop(): Promise<void> {
    await this.endScenario();
    await this.db.drop().catch(() => {});
    await this.stack.stop();
    await this.netns.destroy();
  }
}

/** Every role still running, else its last output (spawned through `ip netns exec`: its own args from the fifth). */
export function assertAlive(roles: RoleProcess[], when: string): void {
  for (const r of roles)
    assert.ok(alive(r), `${r.child.spawnargs.slice(4).join(' ')} died ${when}:\n${r.output().slice(-3000)}`);
}
