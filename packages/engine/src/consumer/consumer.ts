import type { InboundRecord, PartitionLag, Subscriber, TopicPartition } from '../ports/subscriber.ts';
import { recordLogFields } from '../telemetry/log-fields.ts';
import { silentLogger, type Logger } from '../telemetry/logger.ts';
import { observeConsumer, recordConsumeTask, recordRedelivered } from '../telemetry/metrics.ts';
import { AggregateQueues, type HeldEvent } from './aggregate-queues.ts';
import type { ConsumerDefinition } from './definition.ts';
import { DurableRetries, type DurableRetryConfig } from './durable-retries.ts';
import type { ConsumeExecutor } from './executor.ts';
import { OffsetCommitter, partitionKey, partitionOfKey, type PartitionState } from './offset-committer.ts';
import { Redeliveries } from './redeliveries.ts';
import { ConsumerCounters, type ConsumerStats } from './stats.ts';
import { inMemoryRetry, type TransientPolicy } from './transient-policy.ts';
import { encodeTask, type ConsumeTaskResult, type RecordResult, type WireRecord } from '../records/wire.ts';

export type { ConsumerStats } from './stats.ts';

export interface ConsumerConfig {
  definition: ConsumerDefinition;
  subscriber: Subscriber;
  executor: ConsumeExecutor;
  log?: Logger;
  /**
   * Durable retries: a transient failure becomes a retry ledger row (PostgreSQL) and a delayed job (BullMQ), and
   * the partition moves on. Without it, a transient failure is retried in memory and holds its partition's
   * watermark (also the fallback when the ledger cannot be written). The consumer owns the scheduler (closes it).
   */
  retries?: DurableRetryConfig;
  /** In-memory retries. @defaultValue jittered backoff (transient-policy.ts) */
  transientPolicy?: TransientPolicy;
  /** How often lag is fetched from the broker; 0 = never. @defaultValue 5000 */
  lagIntervalMs?: number;
}

type Held = HeldEvent<PartitionState>;

/**
 * The consumer runtime on the main thread, a small state machine:
 *
 *   created ──start()──▶ running ──stop()──▶ stopping ──▶ stopped
 *
 * Records arrive per partition from the Subscriber and join one FIFO queue per aggregate (the record key;
 * aggregate-queues.ts): an aggregate's head is queued (ready to dispatch), in flight (in a worker task) or
 * waiting (failed transiently, in its backoff). The pump packs ready heads — distinct aggregates, so at most one
 * event per aggregate is in flight — into tasks of up to maxBatchEvents, at most 2 tasks per executor thread.
 * When a task returns (its transaction committed), settled offsets advance each partition's contiguous watermark
 * and the moved watermarks are committed (offset-committer.ts).
 *
 * Backpressure: records held (queued + in flight + waiting) are capped in count and bytes; at a cap every
 * assigned partition is paused (records of a fetch beyond the cap are not taken: fetched again later), below
 * half of both they resume. Rebalance: revoked partitions are forgotten at once — their not-yet-dispatched
 * records dropped, their in-flight ones finish but settle nothing — so no offset is ever committed for a
 * partition after it was revoked. stop(): pause fetching, drop what was not dispatched, wait for in-flight
 * tasks, commit, leave the group, close the pool.
 */
export class Consumer {
  readonly definition: ConsumerDefinition;
  readonly #subscriber: Subscriber;
  readonly #executor: ConsumeExecutor;
  readonly #log: Logger;
  readonly #policy: TransientPolicy;
  readonly #lagIntervalMs: number;
  readonly #queues: AggregateQueues<PartitionState>;
  readonly #offsets: OffsetCommitter;
  readonly #retries: DurableRetries | null;
  readonly #counters = new ConsumerCounters();
  readonly #redeliveries = new Redeliveries();
  readonly #tasks = new Set<Promise<void>>();
  #pumpQueued = false;
  #assigned = new Set<string>();
  #state: 'created' | 'running' | 'stopping' | 'stopped' = 'created';
  #paused = false;
  #lagTimer: NodeJS.Timeout | null = null;
  #lag: PartitionLag[] = [];
  #stopped: Promise<void> | null = null;
  #unobserve: (() => void) | null = null;

  constructor(config: ConsumerConfig) {
    this.definition = config.definition;
    this.#subscriber = config.subscriber;
    this.#executor = config.executor;
    this.#log = (config.log ?? silentLogger).child({ role: 'consumer', consumer: config.definition.name });
    this.#policy = config.transientPolicy ?? inMemoryRetry();
    this.#lagIntervalMs = config.lagIntervalMs ?? 5000;
    const { maxInFlightEvents, maxInFlightBytes } = config.definition.limits;
    this.#queues = new AggregateQueues({ maxEvents: maxInFlightEvents, maxBytes: maxInFlightBytes });
    this.#offsets = new OffsetCommitter(this.#subscriber, this.#log, () => this.#state === 'running');
    this.#retries = config.retries
      ? new DurableRetries(config.retries, config.definition, config.executor, this.#log, this.#counters)
      : null;
  }

  async start(): Promise<void> {
    if (this.#state !== 'created') throw new Error(`consumer ${this.definition.name} was already started`);
    this.#state = 'running';
    this.#unobserve = observeConsumer(this, this.definition.name, () => this.#lag, this.#retries?.sql ?? null);
    // Due retries need no partitions: they start at once, not after the group join.
    this.#retries?.start();
    await this.#subscriber.start({ onRecords: (r) => this.#onRecords(r), onAssignment: (a) => this.#onAssignment(a) });
    if (this.#lagIntervalMs > 0) {
      this.#lagTimer = setInterval(() => void this.refreshLag(), this.#lagIntervalMs);
      this.#lagTimer.unref();
    }
    this.#log.info({ topics: this.definition.topics, groupId: this.definition.groupId }, 'consumer started');
  }

  stats(): ConsumerStats {
    return {
      consumer: this.definition.name,
      state: this.#state,
      ...this.#counters.snapshot(),
      commits: this.#offsets.commits,
      tasksRunning: this.#tasks.size,
      assigned: this.#assigned.size,
      paused: this.#paused,
      inFlightEvents: this.#queues.events,
      inFlightBytes: this.#queues.bytes,
      lag: this.#lag,
      totalLag: this.#lag.reduce((s, p) => s + p.lag, 0),
    };
  }

  /** Fetches lag from the broker now (also done every lagIntervalMs). */
  async refreshLag(): Promise<PartitionLag[]> {
    try {
      this.#lag = await this.#subscriber.lag();
    } catch (cause) {
      this.#log.warn({ err: String(cause) }, 'could not fetch consumer lag');
    }
    return this.#lag;
  }

  stop(): Promise<void> {
    this.#stopped ??= this.#stop();
    return this.#stopped;
  }

  async #stop(): Promise<void> {
    this.#unobserve?.();
    if (this.#state === 'created') {
      this.#state = 'stopped';
      await this.#retries?.close();
      await this.#executor.close();
      await this.#subscriber.close();
      return;
    }
    this.#state = 'stopping';
    if (this.#lagTimer) clearInterval(this.#lagTimer);
    // Due retries in progress finish first (they run on the executor); later ones wait in Redis for a restart.
    await this.#retries?.close();
    this.#subscriber.pause(this.#assignedList());
    this.#queues.drop(() => true);
    while (this.#tasks.size > 0) await Promise.allSettled([...this.#tasks]);
    this.#queues.drop(() => true);
    await this.#offsets.commit();
    await this.#subscriber.close();
    await this.#executor.close();
    this.#state = 'stopped';
    this.#log.info({ ...this.#counters.snapshot(), commits: this.#offsets.commits }, 'consumer stopped');
  }

  #onAssignment(partitions: TopicPartition[]): void {
    const next = new Set(partitions.map((p) => partitionKey(p.topic, p.partition)));
    const revoked = this.#offsets.revokeAllBut(next);
    if (revoked.length > 0) {
      const gone = new Set(revoked);
      this.#queues.drop((event) => gone.has(event.part));
    }
    this.#assigned = next;
    this.#log.info({ assigned: [...next], revoked: revoked.map((p) => p.key) }, 'consumer assignment');
    if (this.#paused) this.#subscriber.pause(this.#assignedList());
    this.#pump();
  }

  /** Takes a prefix of fetched records into the aggregate queues; stops at a cap or an unassigned partition. */
  #onRecords(records: InboundRecord[]): number {
    if (this.#state !== 'running') return 0;
    let taken = 0;
    let redelivered = 0;
    for (const record of records) {
      if (!this.#assigned.has(partitionKey(record.topic, record.partition))) break;
      const part = this.#offsets.partition(record.topic, record.partition);
      const offset = BigInt(record.offset);
      if (offset <= part.highest) {
        taken++; // fetched again after a rebalance: already held
        redelivered++;
        continue;
      }
      // A record without a key has no aggregate: it queues alone (and fails as invalid in the worker).
      const aggregate = record.key ?? `\u0000${part.key}:${record.offset}`;
      // At a cap, the rest stays on the broker (fetched again after resume): the caps hold exactly.
      if (!this.#queues.offer(record, offset, part, aggregate)) break;
      this.#offsets.track(part, offset);
      taken++;
      this.#counters.received++;
      if (this.#redeliveries.received(part.key, offset)) redelivered++;
    }
    if (redelivered > 0) recordRedelivered(this.definition.name, records[0]!.topic, redelivered);
    this.#backpressure();
    this.#queuePump();
    return taken;
  }

  /**
   * Pumps once the subscriber has handed over every partition of the fetch response it is delivering (its
   * batches come one partition at a time, in one turn of the event loop): pumping at each partition would start a
   * task of an event or two per partition under a live load, one transaction each.
   */
  #queuePump(): void {
    if (this.#pumpQueued) return;
    this.#pumpQueued = true;
    setImmediate(() => {
      this.#pumpQueued = false;
      this.#pump();
    });
  }

  /**
   * Dispatches ready heads to the executor while it has room: one task per thread at once, a second per thread
   * only when a full batch is ready. Group commit: while every thread has a transaction open, what arrives waits
   * to join the next batch rather than start a transaction of its own — under load a task carries many events
   * (one commit, one fsync for all), and a thread that goes idle still takes whatever is ready at once.
   */
  #pump(): void {
    if (this.#state !== 'running') return;
    const threads = Math.max(1, this.#executor.concurrency);
    const { maxBatchEvents } = this.definition.limits;
    while (this.#tasks.size < threads * 2 && this.#queues.readyCount > 0) {
      if (this.#tasks.size >= threads && this.#queues.readyCount < maxBatchEvents) break;
      this.#dispatch(this.#queues.take(maxBatchEvents));
    }
  }

  #dispatch(batch: Held[]): void {
    const wire: WireRecord[] = batch.map((event) => ({ ...event.record, attempt: event.attempt + 1 }));
    this.#counters.tasks++;
    const dispatched = performance.now();
    const scope = { consumer: this.definition.name, groupId: this.definition.groupId };
    const task: Promise<void> = this.#executor.run(encodeTask(wire, this.#retries !== null)).then(
      (result) => {
        recordConsumeTask(scope, wire, result.results, performance.now() - dispatched);
        this.#onResult(batch, result);
      },
      (cause: unknown) => {
        this.#log.warn({ err: String(cause), events: batch.length }, 'consume task failed; its events will be retried');
        const results = batch.map(() => ({
          outcome: 'transient' as const,
          drained: 0,
          code: 'task_failed',
          detail: String(cause),
        }));
        recordConsumeTask(scope, wire, results, performance.now() - dispatched);
        this.#onResult(batch, { results });
      },
    );
    const tracked = task.finally(() => {
      this.#tasks.delete(tracked);
      this.#pump();
    });
    this.#tasks.add(tracked);
  }

  #onResult(batch: Held[], result: ConsumeTaskResult): void {
    for (let i = 0; i < batch.length; i++) {
      const event = batch[i]!;
      const r = result.results[i]!;
      if (r.outcome === 'transient') this.#retryInMemory(event, r);
      else this.#settle(event, r);
    }
    this.#backpressure();
    void this.#offsets.commit();
  }

  /** A durable outcome: count it, move the watermark, free the aggregate, enqueue any retry jobs it wrote. */
  #settle(event: Held, r: RecordResult): void {
    this.#counters.count(r.outcome, r.drained);
    if (r.outcome === 'applied' || r.drained > 0) this.#offsets.noteApplied();
    this.#logOutcome(event.record, r);
    this.#offsets.settle(event.part, event.offset);
    this.#queues.settle(event);
    if (r.outcome === 'scheduled' && r.retry) this.#retries?.enqueue(r.retry);
    for (const job of r.successorRetries ?? []) this.#retries?.enqueue(job);
  }

  /** A transient failure without a durable retry: the event waits at its aggregate's head for its backoff. */
  #retryInMemory(event: Held, r: RecordResult): void {
    this.#counters.transientRetries++;
    event.attempt++;
    if (event.part.revoked || this.#state !== 'running') {
      this.#queues.settle(event);
      return;
    }
    const delay = this.#policy.delayMs(event.attempt);
    if (event.attempt === 1 || event.attempt % 10 === 0) {
      const fields = {
        ...recordLogFields(event.record),
        attempt: event.attempt,
        error_code: r.code,
        err: r.detail,
        retryInMs: delay,
      };
      this.#log.warn(fields, 'transient failure; retrying');
    }
    this.#queues.hold(event, delay, () => this.#pump());
  }

  /**
   * The outcomes an operator acts on, one line per event. The rest (applied, duplicate, ignored, parked: parking
   * is routine when relays race) are only counted (telemetry/metrics.ts).
   */
  #logOutcome(record: InboundRecord, r: RecordResult): void {
    if (r.outcome === 'failed') {
      this.#log.error(
        { ...recordLogFields(record), error_code: r.code, err: r.detail },
        'event failed for good: in the failure store, its aggregate blocked',
      );
    } else if (r.outcome === 'scheduled') {
      const dueAt = r.retry ? new Date(r.retry.dueAt).toISOString() : undefined;
      this.#log.warn(
        { ...recordLogFields(record), error_code: r.code, err: r.detail, attempt: r.retry?.attempt, dueAt },
        'event scheduled for a durable retry',
      );
    }
  }

  #backpressure(): void {
    if (!this.#paused && this.#queues.atCap()) {
      this.#paused = true;
      this.#counters.pauses++;
      this.#subscriber.pause(this.#assignedList());
    } else if (this.#paused && this.#state === 'running' && this.#queues.belowHalf()) {
      this.#paused = false;
      this.#subscriber.resume(this.#assignedList());
    }
  }

  #assignedList(): TopicPartition[] {
    return [...this.#assigned].map(partitionOfKey);
  }
}
