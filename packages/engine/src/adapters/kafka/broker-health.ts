import kafkajs, { type Admin } from 'kafkajs';
import type { BrokerHealthReport, BrokerNodeHealth, TopicReplicaHealth } from '../../ports/broker-health.ts';
import { createKafka, type KafkaConnection } from './client.ts';
import { leaderlessTopic, replicaHealth, unreadableTopic, type PartitionReplicas } from './replica-health.ts';

// kafkajs's enums are properties of its CommonJS export, not named exports Node can link.
const TOPIC_RESOURCE = kafkajs.ConfigResourceTypes.TOPIC;

export interface KafkaHealthProbeOptions {
  /**
   * The whole probe's deadline; past it the probe reports the broker unreachable. Well above nodeTimeoutMs, so
   * a node that does not answer is reported as such rather than failing the whole probe. @defaultValue 5000
   */
  deadlineMs?: number;
  /** Each node's own connect + metadata answer. @defaultValue 2000 */
  nodeTimeoutMs?: number;
}

/**
 * The Kafka broker-health probe, over the control plane's admin client: per topic, the partitions' leader,
 * replicas and ISR (fetchTopicMetadata), the topic's min.insync.replicas (describeConfigs), and whether each node
 * the cluster lists answers a connection of its own — the metadata alone keeps a dead node in the ISR until its
 * session ends, and for ever while the controller quorum is lost (replica-health.ts).
 *
 * Bounded: one deadline over the whole probe, a short one per node, no retries beyond the client's. It never
 * throws: a probe that failed is a report with `ok` false and the cause's message; one unreadable topic is a
 * topic with its error, the others are still counted. A node's own connection is made and closed per probe.
 */
export class KafkaHealthProbe {
  readonly #admin: Admin;
  readonly #connection: KafkaConnection;
  readonly #deadlineMs: number;
  readonly #nodeTimeoutMs: number;
  /** Last known min.insync.replicas per topic: a config read that fails keeps the previous value. */
  readonly #minInsync = new Map<string, number>();
  /** Last known partition count per topic, for a topic whose metadata answers that a partition has no leader. */
  readonly #partitionCounts = new Map<string, number>();

  constructor(admin: Admin, connection: KafkaConnection, options: KafkaHealthProbeOptions = {}) {
    this.#admin = admin;
    this.#connection = connection;
    this.#deadlineMs = options.deadlineMs ?? 5000;
    this.#nodeTimeoutMs = options.nodeTimeoutMs ?? 2000;
  }

  async probe(connected: () => Promise<void>, topics: string[]): Promise<BrokerHealthReport> {
    const at = new Date();
    try {
      return await withDeadline(this.#probe(connected, topics, at), this.#deadlineMs);
    } catch (cause) {
      // A report, not a throw: the sampler's timer and a GraphQL read both go on; the message keeps the cause's.
      return { at, ok: false, error: `broker_unavailable: ${message(cause)}`, brokers: [], topics: [] };
    }
  }

  async #probe(connected: () => Promise<void>, topics: string[], at: Date): Promise<BrokerHealthReport> {
    await connected();
    const cluster = await this.#admin.describeCluster();
    // Again: past the deadline this work goes on, and a call on the admin after close() would open it again.
    await connected();
    const [brokers, metadata] = await Promise.all([
      Promise.all(cluster.brokers.map((b) => this.#node(b.nodeId, `${b.host}:${b.port}`))),
      Promise.all(topics.map((topic) => this.#topicMetadata(topic))),
      this.#readMinInsync(topics),
    ]);
    brokers.push(...missingNodes(cluster.brokers, metadata));
    const down = new Set(brokers.filter((b) => !b.reachable).map((b) => b.id));
    const health: TopicReplicaHealth[] = metadata.map((m) => {
      const minInsync = this.#minInsync.get(m.topic) ?? null;
      if (m.leaderless) return leaderlessTopic(m.topic, this.#partitionCounts.get(m.topic) ?? 1, minInsync);
      if (m.error !== null) return unreadableTopic(m.topic, m.error);
      return replicaHealth(m.topic, m.partitions, minInsync, down);
    });
    return { at, ok: true, error: null, brokers, topics: health };
  }

  /** One topic's metadata on its own: an unknown topic must not hide the others. */
  async #topicMetadata(
    topic: string,
  ): Promise<{ topic: string; partitions: PartitionReplicas[]; error: string | null; leaderless: boolean }> {
    try {
      const { topics } = await this.#admin.fetchTopicMetadata({ topics: [topic] });
      const partitions = topics[0]?.partitions ?? [];
      if (partitions.length > 0) this.#partitionCounts.set(topic, partitions.length);
      return { topic, partitions, error: null, leaderless: false };
    } catch (cause) {
      // kafkajs fails the whole answer when one partition carries an error; LEADER_NOT_AVAILABLE is the answer
      // for a partition that is offline while the cluster is up — the case the offline count exists for.
      return { topic, partitions: [], error: message(cause), leaderless: hasErrorType(cause, 'LEADER_NOT_AVAILABLE') };
    }
  }

  /**
   * The effective value, whether set on the topic or inherited from the broker (describeConfigs reports both).
   * One request per topic: kafkajs fails a whole describeConfigs when one resource has an error, so one unknown
   * topic would leave every topic's value unknown (and below-min-insync never counted).
   */
  async #readMinInsync(topics: string[]): Promise<void> {
    await Promise.all(topics.map((topic) => this.#readTopicMinInsync(topic)));
  }

  async #readTopicMinInsync(name: string): Promise<void> {
    try {
      const { resources } = await this.#admin.describeConfigs({
        includeSynonyms: false,
        resources: [{ type: TOPIC_RESOURCE, name, configNames: ['min.insync.replicas'] }],
      });
      const entry = resources[0]?.configEntries.find((e) => e.configName === 'min.insync.replicas');
      const value = Number(entry?.configValue);
      if (resources[0]?.errorCode === 0 && Number.isInteger(value)) this.#minInsync.set(name, value);
    } catch {
      // A node that has not learnt of the topic yet answers UNKNOWN_TOPIC_OR_PARTITION: the last value stands.
    }
  }

  /** Whether the node answers on its own connection (connect, ApiVersions and SASL if set) within nodeTimeoutMs. */
  async #node(id: number, address: string): Promise<BrokerNodeHealth> {
    const admin = createKafka({
      ...this.#connection,
      brokers: [address],
      clientId: `${this.#connection.clientId ?? 'postbox'}-health`,
      connectionTimeoutMs: Math.min(this.#connection.connectionTimeoutMs ?? 3000, this.#nodeTimeoutMs),
      requestTimeoutMs: this.#nodeTimeoutMs,
    }).admin({ retry: { retries: 0 } });
    const connecting = admin.connect();
    // Closed once the connect settles (kafkajs bounds it by its own timeouts and retries); awaited only when it
    // answered, so a node that does not answer costs the probe nodeTimeoutMs, not twice that.
    const closed = connecting
      .catch(() => {})
      .then(() => admin.disconnect())
      .catch(() => {});
    try {
      await withDeadline(connecting, this.#nodeTimeoutMs);
    } catch (cause) {
      return { id, address, reachable: false, error: message(cause) };
    }
    await withDeadline(closed, this.#nodeTimeoutMs).catch(() => {});
    return { id, address, reachable: true, error: null };
  }
}

/**
 * Nodes that hold replicas but are not among the live brokers: the cluster drops a node from its broker list once
 * its session ends (fenced), so a dead node would otherwise vanish from the report instead of showing as down.
 */
function missingNodes(
  live: Array<{ nodeId: number }>,
  metadata: Array<{ partitions: PartitionReplicas[] }>,
): BrokerNodeHealth[] {
  const listed = new Set(live.map((b) => b.nodeId));
  const missing = new Set<number>();
  for (const m of metadata)
    for (const p of m.partitions) for (const id of p.replicas) if (!listed.has(id)) missing.add(id);
  return [...missing]
    .sort((a, b) => a - b)
    .map((id) => ({
      id,
      address: '',
      reachable: false,
      error: 'not a live broker: the cluster has fenced it or lost it',
    }));
}

/** Whether a kafkajs error, or one it wraps (retries exceeded keep the last as originalError), is of `type`. */
export function hasErrorType(cause: unknown, type: string, depth = 0): boolean {
  if (!cause || typeof cause !== 'object' || depth > 5) return false;
  const e = cause as { type?: unknown; originalError?: unknown; cause?: unknown };
  if (e.type === type) return true;
  return hasErrorType(e.originalError, type, depth + 1) || hasErrorType(e.cause, type, depth + 1);
}

function message(cause: unknown): string {
  return (cause as Error)?.message ?? String(cause);
}

/** `work`, or a rejection once `ms` have passed (the work itself goes on; its late failure is swallowed). */
async function withDeadline<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  work.catch(() => {});
  try {
    return await Promise.race([
      work,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
