import type { Queryable } from '../db/connect.ts';
import type { BrokerOffsets, PartitionPosition } from '../ports/offsets.ts';
import { consumerCounts, outboxByTopic } from '../queries/control-counts.ts';
import { listConsumers } from '../queries/consumer-registry.ts';
import { RateWindow, drainSeconds } from './rate-window.ts';

export interface TopicBacklog {
  topic: string;
  pending: number;
  publishing: number;
  failed: number;
  oldestPendingAgeMs: number | null;
}

export interface PartitionBacklog extends PartitionPosition {
  lag: number;
}

export interface ConsumerBacklog {
  consumer: string;
  groupId: string | null;
  topics: string[];
  partitions: PartitionBacklog[];
  lag: number;
  /** Committed offsets per second over the last minute (null until two samples). */
  consumeRate: number | null;
  /** Records written to this consumer's topics per second over the last minute. */
  produceRate: number | null;
  retriesWaiting: number;
  parked: number;
  blockedAggregates: number;
  failures: number;
  /** lag ÷ (consumeRate − produceRate); null when not draining. */
  drainSeconds: number | null;
}

export interface BacklogReport {
  at: Date;
  outbox: {
    pending: number;
    publishing: number;
    failed: number;
    oldestPendingAgeMs: number | null;
    publishRate: number | null;
    topics: TopicBacklog[];
  };
  consumers: ConsumerBacklog[];
  /** Why broker figures (lag, rates) are missing, or null. */
  brokerError: string | null;
}

export interface BacklogMonitorOptions {
  sql: Queryable;
  offsets: BrokerOffsets;
  /** Topics the relay publishes to, beyond those with rows or consumers. */
  topics?: string[];
  /** @defaultValue 60000 */
  rateWindowMs?: number;
}

/**
 * Where everything is: outbox rows by state and topic (PostgreSQL), each consumer's lag per partition (broker
 * offsets), rates from offsets sampled over a minute, and the consumer-side counts. Rates need samples over
 * time, so the control plane keeps one monitor and `start`s its sampler.
 */
export class BacklogMonitor {
  readonly #o: BacklogMonitorOptions;
  readonly #topicEnds = new Map<string, RateWindow>();
  readonly #committed = new Map<string, RateWindow>();
  #timer: NodeJS.Timeout | null = null;
  #sampling: Promise<unknown> | null = null;

  constructor(options: BacklogMonitorOptions) {
    this.#o = options;
  }

  /** Samples every `intervalMs` so rates are known at the first query; errors wait for the next tick. */
  start(intervalMs = 5000): void {
    if (this.#timer) return;
    const sample = () => {
      if (this.#sampling) return; // one sample at a time: a slow database does not pile them up
      this.#sampling = this.report()
        .catch(() => {})
        .finally(() => (this.#sampling = null));
    };
    this.#timer = setInterval(sample, intervalMs);
    this.#timer.unref();
    sample();
  }

  /** Stops sampling and waits for a sample in flight, so its connections can be closed after. */
  async stop(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
    await this.#sampling;
  }

  async report(): Promise<BacklogReport> {
    const [byTopic, counts, registered] = await Promise.all([
      outboxByTopic(this.#o.sql),
      consumerCounts(this.#o.sql),
      listConsumers(this.#o.sql),
    ]);
    const now = Date.now();
    const outboxTopics = [
      ...new Set([...(this.#o.topics ?? []), ...byTopic.map((t) => t.topic), ...registered.flatMap((c) => c.topics)]),
    ].sort();
    let brokerError: string | null = null;
    const ends = new Map<string, PartitionPosition[]>();
    try {
      for (const p of await this.#o.offsets.positions(null, outboxTopics))
        ends.set(p.topic, [...(ends.get(p.topic) ?? []), p]);
    } catch (cause) {
      brokerError = (cause as Error).message;
    }
    for (const [topic, parts] of ends)
      window(this.#topicEnds, topic, this.#o.rateWindowMs).add(now, sumBig(parts.map((p) => p.high)));
    const rateOf = (topics: string[]) => {
      const rates = topics.map((t) => this.#topicEnds.get(t)?.perSecond() ?? null);
      return rates.some((r) => r === null) || rates.length === 0 ? null : rates.reduce((a, b) => a! + b!, 0);
    };

    const consumers: ConsumerBacklog[] = [];
    const names = [...new Set([...registered.map((c) => c.consumer_name), ...counts.keys()])].sort();
    for (const name of names) {
      const reg = registered.find((c) => c.consumer_name === name);
      const c = counts.get(name);
      let partitions: PartitionBacklog[] = [];
      if (reg && brokerError === null) {
        try {
          partitions = (await this.#o.offsets.positions(reg.group_id, reg.topics)).map((p) => ({
            ...p,
            lag: lagOf(p),
          }));
          window(this.#committed, name, this.#o.rateWindowMs).add(
            now,
            sumBig(partitions.map((p) => p.committed ?? '0')),
          );
        } catch (cause) {
          brokerError = (cause as Error).message;
        }
      }
      const lag = partitions.reduce((a, p) => a + p.lag, 0);
      const consumeRate = this.#committed.get(name)?.perSecond() ?? null;
      const produceRate = reg ? rateOf(reg.topics) : null;
      consumers.push({
        consumer: name,
        groupId: reg?.group_id ?? null,
        topics: reg?.topics ?? [],
        partitions,
        lag,
        consumeRate,
        produceRate,
        retriesWaiting: c?.retries_waiting ?? 0,
        parked: c?.parked ?? 0,
        blockedAggregates: c?.blocked ?? 0,
        failures: c?.failures ?? 0,
        drainSeconds: partitions.length === 0 ? null : drainSeconds(lag, consumeRate, produceRate),
      });
    }
    const topics = byTopic.map((t) => ({
      topic: t.topic,
      pending: t.pending,
      publishing: t.publishing,
      failed: t.failed,
      oldestPendingAgeMs: t.oldest_pending_ms,
    }));
    const ages = topics.map((t) => t.oldestPendingAgeMs).filter((a): a is number => a !== null);
    return {
      at: new Date(now),
      outbox: {
        pending: topics.reduce((a, t) => a + t.pending, 0),
        publishing: topics.reduce((a, t) => a + t.publishing, 0),
        failed: topics.reduce((a, t) => a + t.failed, 0),
        oldestPendingAgeMs: ages.length === 0 ? null : Math.max(...ages),
        publishRate: rateOf([...ends.keys()]),
        topics,
      },
      consumers,
      brokerError,
    };
  }
}

function window(map: Map<string, RateWindow>, key: string, windowMs: number | undefined): RateWindow {
  let w = map.get(key);
  if (!w) map.set(key, (w = new RateWindow(windowMs)));
  return w;
}

function lagOf(p: PartitionPosition): number {
  return Math.max(0, Number(BigInt(p.high) - BigInt(p.committed ?? '0')));
}

function sumBig(values: string[]): number {
  return Number(values.reduce((a, v) => a + BigInt(v), 0n));
}
