import { jetstreamManager, RetentionPolicy, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { nanos } from '@nats-io/transport-node';
import { ConfigError } from '../../errors.ts';
import { connectNats, type NatsConnectionOptions } from './client.ts';
import { classifyNatsError } from './classify.ts';

/**
 * One JetStream stream per partition of a topic (docs/brokers.md): partition p of topic t is stream
 * `PB_<t>_<p>` on subject `<t>.<p>`. A stream of its own gives the partition dense sequence numbers, which act as
 * offsets (lag = last sequence − ack floor) and keep an AckAll consumer's floor within its partition.
 */
export function streamName(topic: string, partition: number): string {
  return `PB_${topic.replace(/[^A-Za-z0-9_-]/g, '_')}_${partition}`;
}

/**
 * The partition streams of a topic on the server, by name (`PB_<topic>_<p>`), sorted by partition. Streams of other
 * topics whose subjects overlap (`>`, `<topic>.x`) are not counted.
 */
export async function partitionStreams(
  jsm: JetStreamManager,
  topic: string,
): Promise<Array<{ name: string; partition: number }>> {
  const prefix = streamName(topic, 0).slice(0, -1);
  const out: Array<{ name: string; partition: number }> = [];
  for await (const name of jsm.streams.names(`${topic}.*`)) {
    const suffix = name.startsWith(prefix) ? name.slice(prefix.length) : '';
    if (/^\d+$/.test(suffix)) out.push({ name, partition: Number(suffix) });
  }
  return out.sort((a, b) => a.partition - b.partition);
}

export function subjectOf(topic: string, partition: number): string {
  return `${topic}.${partition}`;
}

// Subject tokens: no whitespace or wildcards; the partition is the last token.
const TOPIC = /^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/;

/** A topic as Postbox configures it (POSTBOX_TOPICS): the same shape as Kafka's TopicSpec. */
export interface StreamTopicSpec {
  topic: string;
  /** @defaultValue 12 */
  partitions?: number;
  /** JetStream replicas. @defaultValue 1 */
  replicationFactor?: number;
}

export interface NatsStreamOptions {
  /**
   * How long JetStream remembers a message id (Nats-Msg-Id = event id) to drop a re-send: longer than the relay
   * takes to re-send an unconfirmed batch (its lease, 30 s, plus a backoff). @defaultValue 300000 (5 min)
   */
  duplicateWindowMs?: number;
}

/**
 * Creates the streams that are missing (file storage, limits retention) and checks the ones there: a stream
 * whose subjects, storage or duplicate window differ from what Postbox would create is refused by name rather than
 * used as it is. Returns the partition count of every topic.
 */
export async function ensureStreams(
  connection: NatsConnectionOptions,
  specs: StreamTopicSpec[],
  options: NatsStreamOptions = {},
): Promise<Map<string, number>> {
  for (const s of specs) {
    if (!TOPIC.test(s.topic))
      throw new ConfigError(`topic "${s.topic}" cannot be a NATS subject: use letters, digits, _ and -, dot-separated`);
  }
  const nc = await connectNats({ ...connection, name: `${connection.name ?? 'postbox'}-setup` }).catch((cause) => {
    throw classifyNatsError(cause);
  });
  try {
    const jsm = await jetstreamManager(nc);
    const counts = new Map<string, number>();
    for (const spec of specs) {
      const partitions = spec.partitions ?? 12;
      for (let p = 0; p < partitions; p++) await ensureStream(jsm, spec, p, options);
      counts.set(spec.topic, partitions);
    }
    return counts;
  } catch (cause) {
    throw cause instanceof ConfigError ? cause : classifyNatsError(cause);
  } finally {
    await nc.close().catch(() => {});
  }
}

async function ensureStream(jsm: JetStreamManager, spec: StreamTopicSpec, p: number, options: NatsStreamOptions) {
  const name = streamName(spec.topic, p);
  const subject = subjectOf(spec.topic, p);
  const window = nanos(options.duplicateWindowMs ?? 300_000);
  const existing = await jsm.streams.info(name).catch(() => null);
  if (!existing) {
    await jsm.streams.add({
      name,
      subjects: [subject],
      storage: StorageType.File,
      retention: RetentionPolicy.Limits,
      num_replicas: spec.replicationFactor ?? 1,
      duplicate_window: window,
    });
    return;
  }
  const c = existing.config;
  const drift = [
    c.subjects.length !== 1 || c.subjects[0] !== subject
      ? `subjects ${JSON.stringify(c.subjects)}, not ["${subject}"]`
      : null,
    c.storage !== StorageType.File ? `storage ${c.storage}, not file` : null,
    c.retention !== RetentionPolicy.Limits ? `retention ${c.retention}, not limits` : null,
    c.duplicate_window !== window ? `duplicate_window ${c.duplicate_window} ns, not ${window} ns` : null,
  ].filter((d): d is string => d !== null);
  if (drift.length > 0)
    throw new ConfigError(`NATS stream ${name} exists with ${drift.join('; ')}: change or delete it, Postbox will not`);
}
