import type { Sql } from '../db/connect.ts';
import type { InboundRecord, PartitionLag, Subscriber, TopicPartition } from '../ports/subscriber.ts';
import { processRetry, type RetryProcessOutcome } from '../retry/process-retry.ts';
import { reconcileLedger } from '../retry/reconcile.ts';
import type { RetryJob, RetryScheduler } from '../retry/scheduler.ts';
import { recordLogFields } from '../telemetry/log-fields.ts';
import { silentLogger, type Logger } from '../telemetry/logger.ts';
import { observeConsumer, recordConsumeTask, recordRetryOutcome } from '../telemetry/metrics.ts';
import { failpoint } from '../testing/failpoint.ts';
import type { ConsumerDefinition } from './definition.ts';
import type { ConsumeExecutor } from './executor.ts';
import { inMemoryRetry, type TransientPolicy } from './transient-policy.ts';
import { Watermark } from './watermark.ts';
import { encodeTask, type ConsumeTaskResult, type WireRecord } from './wire.ts';

/**
 * The consumer runtime on the main thread, a small state machine:
 *
 *   created ──start()──▶ running ──stop()──▶ stopping ──▶ stopped
 *
 * Records arrive per partition from the Subscriber and join one FIFO queue per aggregate (the record key). An
 * aggregate is idle (nothing buffered), ready (its head may be dispatched), busy (its head is in a worker task)
 * or waiting (its head failed transiently and waits for its backoff). The scheduler packs ready heads — distinct
 * aggregates, so at most one event per aggregate is in flight — into tasks of up to maxBatchEvents, at most
 * 2 tasks per executor thread. When a task returns (its transaction committed), settled offsets advance each
 * partition's contiguous watermark and the moved watermarks are committed.
 *
 * Backpressure: records held (buffered + in flight + waiting) are capped in count and bytes; at a cap every
 * assigned partition is paused (records of a fetch beyond the cap are not taken: fetched again later), below
 * half of both they resume. Rebalance: revoked partitions are forgotten at
 * once — their not-yet-dispatched records dropped, their in-flight ones finish but settle nothing — so no offset
 * is ever committed for a partition after it was revoked. stop(): pause fetching, drop what was not dispatched,
 * wait for in-flight tasks, commit, leave the group, close the pool.
 */
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
  retries?: { scheduler: RetryScheduler; sql: Sql; reconcileIntervalMs?: number };
  /** In-memory retries. @defaultValue jittered backoff (transient-policy.ts) */
  transientPolicy?: TransientPolicy;
  /** How often lag is fetched from the broker; 0 = never. @defaultValue 5000 */
  lagIntervalMs?: number;
}

export interface ConsumerStats {
  consumer: string;
  state: string;
  received: number;
  applied: number;
  duplicates: number;
  ignored: number;
  parked: number;
  drained: number;
  failed: number;
  transientRetries: number;
  /** Transient failures handed to the durable schedule (ledger row + job). */
  retriesScheduled: number;
  /** Due retries run by this process, by how they ended. */
  retriesRun: Record<RetryProcessOutcome, number>;
  /** Ledger rows whose job was missing and was enqueued again by reconciliation. */
  retriesReconciled: number;
  /** Worker tasks dispatched so far. */
  tasks: number;
  /** Worker tasks running now. */
  tasksRunning: number;
  /** Partitions this member holds now (0 between a member's crash and its rejoin). */
  assigned: number;
  commits: number;
  pauses: number;
  paused: boolean;
  inFlightEvents: number;
  inFlightBytes: number;
  /** Last fetched lag per partition (empty until fetched). */
  lag: PartitionLag[];
  totalLag: number;
}

interface PartitionState extends TopicPartition {
  key: string;
  watermark: Watermark;
  highest: bigint;
  revoked: boolean;
  committed: bigint | null;
}

interface Item {
  record: InboundRecord;
  offset: bigint;
  bytes: number;
  attempt: number;
  part: PartitionState;
  state: 'queued' | 'running' | 'waiting';
  timer?: NodeJS.Timeout;
}

interface AggregateQueue {
  key: string;
  items: Item[];
}

export class Consumer {
  readonly definition: ConsumerDefinition;
  readonly #subscriber: Subscriber;
  readonly #executor: ConsumeExecutor;
  readonly #log: Logger;
  readonly #policy: TransientPolicy;
  readonly #lagIntervalMs: number;
  readonly #partitions = new Map<string, PartitionState>();
  #assigned = new Set<string>();
  readonly #aggregates = new Map<string, AggregateQueue>();
  readonly #ready = new Set<string>();
  readonly #dirty = new Set<PartitionState>();
  readonly #tasks = new Set<Promise<void>>();
  #state: 'created' | 'running' | 'stopping' | 'stopped' = 'created';
  #inFlightEvents = 0;
  #inFlightBytes = 0;
  #paused = false;
  #committing: Promise<void> | null = null;
  #commitAgain = false;
  #appliedSinceCommit = false;
  #lagTimer: NodeJS.Timeout | null = null;
  #lag: PartitionLag[] = [];
  #stopped: Promise<void> | null = null;
  readonly #retries: ConsumerConfig['retries'];
  #reconcileTimer: NodeJS.Timeout | null = null;
  #unobserve: (() => void) | null = null;
  readonly #stats = {
    received: 0, applied: 0, duplicates: 0, ignored: 0, parked: 0, drained: 0, failed: 0, transientRetries: 0, retriesScheduled: 0,
    retriesRun: { stale: 0, settled: 0, rescheduled: 0, exhausted: 0, expired: 0 } as Record<RetryProcessOutcome, number>,
    retriesReconciled: 0, tasks: 0, commits: 0, pauses: 0,
  };

  constructor(config: ConsumerConfig) {
    this.definition = config.definition;
    this.#subscriber = config.subscriber;
    this.#executor = config.executor;
    this.#log = (config.log ?? silentLogger).child({ role: 'consumer', consumer: config.definition.name });
    this.#policy = config.transientPolicy ?? inMemoryRetry();
    this.#lagIntervalMs = config.lagIntervalMs ?? 5000;
    this.#retries = config.retries;
  }

  async start(): Promise<void> {
    if (this.#state !== 'created') throw new Error(`consumer ${this.definition.name} was already started`);
    this.#state = 'running';
    this.#unobserve = observeConsumer(this, this.definition.name, () => this.#lag, this.#retries?.sql ?? null);
    // Due retries need no partitions: they start at once, not after the group join.
    if (this.#retries) this.#startRetries(this.#retries);
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
      ...this.#stats,
      retriesRun: { ...this.#stats.retriesRun },
      tasksRunning: this.#tasks.size,
      assigned: this.#assigned.size,
      paused: this.#paused,
      inFlightEvents: this.#inFlightEvents,
      inFlightBytes: this.#inFlightBytes,
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
      await this.#retries?.scheduler.close();
      await this.#executor.close();
      await this.#subscriber.close();
      return;
    }
    this.#state = 'stopping';
    if (this.#lagTimer) clearInterval(this.#lagTimer);
    if (this.#reconcileTimer) clearInterval(this.#reconcileTimer);
    // Due retries in progress finish first (they run on the executor); later ones wait in Redis for a restart.
    await this.#retries?.scheduler.close();
    this.#subscriber.pause(this.#assignedList());
    this.#dropUndispatched(() => true);
    while (this.#tasks.size > 0) await Promise.allSettled([...this.#tasks]);
    this.#dropUndispatched(() => true);
    await this.#commit();
    await this.#subscriber.close();
    await this.#executor.close();
    this.#state = 'stopped';
    this.#log.info({ ...this.#stats }, 'consumer stopped');
  }

  #onAssignment(partitions: TopicPartition[]): void {
    const next = new Set(partitions.map((p) => tpKey(p.topic, p.partition)));
    const revoked = [...this.#partitions.values()].filter((p) => !next.has(p.key));
    for (const part of revoked) {
      part.revoked = true;
      this.#partitions.delete(part.key);
      this.#dirty.delete(part);
    }
    if (revoked.length > 0) {
      const gone = new Set(revoked);
      this.#dropUndispatched((item) => gone.has(item.part));
    }
    this.#assigned = next;
    this.#log.info({ assigned: [...next], revoked: revoked.map((p) => p.key) }, 'consumer assignment');
    if (this.#paused) this.#subscriber.pause(this.#assignedList());
    this.#pump();
  }

  #onRecords(records: InboundRecord[]): number {
    if (this.#state !== 'running') return 0;
    const { maxInFlightEvents, maxInFlightBytes } = this.definition.limits;
    let taken = 0;
    for (const record of records) {
      const key = tpKey(record.topic, record.partition);
      if (!this.#assigned.has(key)) break;
      let part = this.#partitions.get(key);
      if (!part) {
        part = { key, topic: record.topic, partition: record.partition, watermark: new Watermark(), highest: -1n, revoked: false, committed: null };
        this.#partitions.set(key, part);
      }
      const offset = BigInt(record.offset);
      if (offset <= part.highest) {
        taken++; // fetched again after a rebalance: already held
        continue;
      }
      // At a cap, the rest stays on the broker (fetched again after resume): the caps hold exactly.
      if (this.#inFlightEvents >= maxInFlightEvents || this.#inFlightBytes >= maxInFlightBytes) break;
      taken++;
      part.highest = offset;
      part.watermark.track(offset);
      const bytes = (record.value?.length ?? 0) + 256;
      const item: Item = { record, offset, bytes, attempt: 0, part, state: 'queued' };
      // A record without a key has no aggregate: it queues alone (and fails as invalid in the worker).
      const aggregate = record.key ?? `\u0000${key}:${record.offset}`;
      let queue = this.#aggregates.get(aggregate);
      if (!queue) {
        queue = { key: aggregate, items: [] };
        this.#aggregates.set(aggregate, queue);
      }
      queue.items.push(item);
      if (queue.items.length === 1) this.#ready.add(aggregate);
      this.#inFlightEvents++;
      this.#inFlightBytes += bytes;
      this.#stats.received++;
    }
    this.#backpressure();
    this.#pump();
    return taken;
  }

  #pump(): void {
    if (this.#state !== 'running') return;
    const maxTasks = Math.max(1, this.#executor.concurrency * 2);
    while (this.#tasks.size < maxTasks && this.#ready.size > 0) {
      const batch: Array<{ queue: AggregateQueue; item: Item }> = [];
      for (const aggregate of this.#ready) {
        this.#ready.delete(aggregate);
        const queue = this.#aggregates.get(aggregate)!;
        const item = queue.items[0]!;
        item.state = 'running';
        batch.push({ queue, item });
        if (batch.length >= this.definition.limits.maxBatchEvents) break;
      }
      const wire: WireRecord[] = batch.map(({ item }) => ({ ...item.record, attempt: item.attempt + 1 }));
      this.#stats.tasks++;
      const dispatched = performance.now();
      const task: Promise<void> = this.#executor.run(encodeTask(wire, this.#retries !== undefined)).then(
        (result) => {
          recordConsumeTask(this.#scope, wire, result.results, performance.now() - dispatched);
          this.#onResult(batch, result);
        },
        (cause: unknown) => {
          this.#log.warn({ err: String(cause), events: batch.length }, 'consume task failed; its events will be retried');
          const results = batch.map(() => ({ outcome: 'transient' as const, drained: 0, code: 'task_failed', detail: String(cause) }));
          recordConsumeTask(this.#scope, wire, results, performance.now() - dispatched);
          this.#onResult(batch, { results });
        },
      );
      const tracked = task.finally(() => {
        this.#tasks.delete(tracked);
        this.#pump();
      });
      this.#tasks.add(tracked);
    }
  }

  #onResult(batch: Array<{ queue: AggregateQueue; item: Item }>, result: ConsumeTaskResult): void {
    for (let i = 0; i < batch.length; i++) {
      const { queue, item } = batch[i]!;
      const r = result.results[i]!;
      if (r.outcome === 'transient') {
        this.#stats.transientRetries++;
        item.attempt++;
        if (item.part.revoked || this.#state !== 'running') {
          this.#remove(queue, item);
          continue;
        }
        item.state = 'waiting';
        const delay = this.#policy.delayMs(item.attempt);
        if (item.attempt === 1 || item.attempt % 10 === 0) {
          this.#log.warn({ ...recordLogFields(item.record), attempt: item.attempt, error_code: r.code, err: r.detail, retryInMs: delay }, 'transient failure; retrying');
        }
        item.timer = setTimeout(() => {
          item.timer = undefined;
          if (queue.items[0] !== item || item.state !== 'waiting') return;
          item.state = 'queued';
          this.#ready.add(queue.key);
          this.#pump();
        }, delay);
        continue;
      }
      this.#count(r.outcome, r.drained);
      this.#logOutcome(item.record, r);
      if (!item.part.revoked && item.part.watermark.settle(item.offset)) this.#dirty.add(item.part);
      this.#remove(queue, item);
      if (r.outcome === 'scheduled' && r.retry) this.#enqueueRetry({ consumer: this.definition.name, ...r.retry });
      for (const job of r.successorRetries ?? []) this.#enqueueRetry({ consumer: this.definition.name, ...job });
    }
    this.#backpressure();
    void this.#commit();
  }

  /**
   * The outcomes an operator acts on, one line per event. The rest (applied, duplicate, ignored, parked: parking
   * is routine when relays race) are only counted (telemetry/metrics.ts).
   */
  #logOutcome(record: InboundRecord, r: ConsumeTaskResult['results'][number]): void {
    if (r.outcome === 'failed') {
      this.#log.error({ ...recordLogFields(record), error_code: r.code, err: r.detail }, 'event failed for good: in the failure store, its aggregate blocked');
    } else if (r.outcome === 'scheduled') {
      this.#log.warn({ ...recordLogFields(record), error_code: r.code, err: r.detail, attempt: r.retry?.attempt, dueAt: r.retry ? new Date(r.retry.dueAt).toISOString() : undefined }, 'event scheduled for a durable retry');
    }
  }

  get #scope() {
    return { consumer: this.definition.name, groupId: this.definition.groupId };
  }

  #count(outcome: string, drained: number): void {
    const s = this.#stats;
    if (outcome === 'applied') {
      s.applied++;
      this.#appliedSinceCommit = true;
    } else if (outcome === 'duplicate') s.duplicates++;
    else if (outcome === 'ignored') s.ignored++;
    else if (outcome === 'parked') s.parked++;
    else if (outcome === 'failed') s.failed++;
    else if (outcome === 'scheduled') s.retriesScheduled++;
    if (drained > 0) {
      s.drained += drained;
      this.#appliedSinceCommit = true;
    }
  }

  /**
   * The ledger row is committed; now the alarm. If Redis is away the row is still the truth: reconciliation
   * enqueues the job later, so the offset may move on either way.
   */
  #enqueueRetry(job: RetryJob): void {
    failpoint('retry.after-ledger-before-enqueue');
    this.#retries!.scheduler.schedule(job).catch((cause: unknown) => {
      this.#log.warn({ err: String(cause), event_id: job.eventId, attempt: job.attempt }, 'could not enqueue the retry job; reconciliation will');
    });
  }

  /** Runs due retries through the executor (the same engine-owned transaction), and reconciles periodically. */
  #startRetries(retries: NonNullable<ConsumerConfig['retries']>): void {
    const { scheduler, sql } = retries;
    const run = async (record: InboundRecord, attempt: number, traceparent?: string) => {
      const wire: WireRecord[] = [{ ...record, attempt, retry: true }];
      const dispatched = performance.now();
      const result = await this.#executor.run({ ...encodeTask(wire, true), ...(traceparent ? { traceparent } : {}) });
      recordConsumeTask(this.#scope, wire, result.results, performance.now() - dispatched);
      return result.results[0]!;
    };
    scheduler.start(async (job) => {
      const outcome = await processRetry({ sql, consumer: this.definition.name, scheduler, budget: this.definition.retry, definition: this.definition, run }, job);
      this.#stats.retriesRun[outcome]++;
      recordRetryOutcome(this.definition.name, outcome);
      if (outcome !== 'stale') this.#log.info({ event_id: job.eventId, attempt: job.attempt, outcome }, 'retry ran');
    }, (job, error, attemptsMade) => {
      this.#log.warn({ event_id: job?.eventId, attempt: job?.attempt, runs: attemptsMade, err: String(error), cause: error.cause === undefined ? undefined : String(error.cause) }, 'retry run failed; the job runs again (or reconciliation enqueues it)');
    });
    const reconcile = () =>
      reconcileLedger(sql, scheduler).then(
        (report) => {
          this.#stats.retriesReconciled += report.reenqueued;
          if (report.reenqueued > 0) this.#log.warn({ ...report }, 'retry ledger reconciled: jobs were missing and were enqueued again');
        },
        (cause: unknown) => this.#log.warn({ err: String(cause) }, 'retry ledger reconciliation failed; will try again'),
      );
    void reconcile();
    this.#reconcileTimer = setInterval(() => void reconcile(), retries.reconcileIntervalMs ?? 60_000);
    this.#reconcileTimer.unref();
  }

  /** Takes a settled (or abandoned) head off its aggregate queue; the next one becomes ready. */
  #remove(queue: AggregateQueue, item: Item): void {
    const index = queue.items.indexOf(item);
    if (index >= 0) queue.items.splice(index, 1);
    if (item.timer) clearTimeout(item.timer);
    this.#inFlightEvents--;
    this.#inFlightBytes -= item.bytes;
    if (queue.items.length === 0) {
      this.#aggregates.delete(queue.key);
      this.#ready.delete(queue.key);
    } else if (queue.items[0]!.state === 'queued') {
      this.#ready.add(queue.key);
    }
  }

  /** Drops records not in a worker task (queued, or waiting for a retry) that match. */
  #dropUndispatched(match: (item: Item) => boolean): void {
    for (const queue of [...this.#aggregates.values()]) {
      for (const item of [...queue.items]) if (item.state !== 'running' && match(item)) this.#remove(queue, item);
    }
  }

  #backpressure(): void {
    const { maxInFlightEvents, maxInFlightBytes } = this.definition.limits;
    if (!this.#paused && (this.#inFlightEvents >= maxInFlightEvents || this.#inFlightBytes >= maxInFlightBytes)) {
      this.#paused = true;
      this.#stats.pauses++;
      this.#subscriber.pause(this.#assignedList());
    } else if (this.#paused && this.#state === 'running' && this.#inFlightEvents < maxInFlightEvents / 2 && this.#inFlightBytes < maxInFlightBytes / 2) {
      this.#paused = false;
      this.#subscriber.resume(this.#assignedList());
    }
  }

  /** Commits every moved watermark; one commit at a time, later moves coalesce into the next. */
  #commit(): Promise<void> {
    if (this.#committing) {
      this.#commitAgain = true;
      return this.#committing;
    }
    this.#committing = (async () => {
      do {
        this.#commitAgain = false;
        const offsets: Array<TopicPartition & { offset: string }> = [];
        const parts: Array<[PartitionState, bigint]> = [];
        for (const part of this.#dirty) {
          const next = part.watermark.committable();
          if (part.revoked || next === null || next === part.committed) continue;
          offsets.push({ topic: part.topic, partition: part.partition, offset: next.toString() });
          parts.push([part, next]);
        }
        this.#dirty.clear();
        if (offsets.length === 0) continue;
        if (this.#appliedSinceCommit) failpoint('consumer.after-commit-before-offset');
        this.#appliedSinceCommit = false;
        try {
          await this.#subscriber.commit(offsets);
          this.#stats.commits++;
          for (const [part, next] of parts) part.committed = next;
        } catch (cause) {
          // Not lost: the watermark stays, the next settle (or stop) commits it; a crash re-reads, the inbox absorbs.
          this.#log.warn({ err: String(cause) }, 'offset commit failed; will commit with the next batch');
          for (const [part] of parts) if (!part.revoked) this.#dirty.add(part);
          if (this.#state !== 'running') break;
          await new Promise((r) => setTimeout(r, 200));
        }
      } while (this.#commitAgain);
    })().finally(() => {
      this.#committing = null;
    });
    return this.#committing;
  }

  #assignedList(): TopicPartition[] {
    return [...this.#assigned].map((k) => {
      const at = k.lastIndexOf('\u0000');
      return { topic: k.slice(0, at), partition: Number(k.slice(at + 1)) };
    });
  }
}

function tpKey(topic: string, partition: number): string {
  return `${topic}\u0000${partition}`;
}
