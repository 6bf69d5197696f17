import type { Subscriber, TopicPartition } from '../ports/subscriber.ts';
import { type BackoffOptions, backoffDelayMs } from '../retry/backoff.ts';
import type { Logger } from '../telemetry/logger.ts';
import { failpoint } from '../testing/failpoint.ts';
import { Watermark } from './watermark.ts';

/** One assigned partition: what was received, what settled, what was committed. */
export interface PartitionState extends TopicPartition {
  readonly key: string;
  readonly watermark: Watermark;
  /** Highest offset taken in (a record at or below it, fetched again after a rebalance, is already held). */
  highest: bigint;
  /** Revoked: its in-flight events finish but settle nothing, and nothing is committed for it again. */
  revoked: boolean;
  committed: bigint | null;
}

/** The pause before committing again after a failed commit: full jitter, at most 5 s between tries. */
const COMMIT_RETRY: BackoffOptions = { baseMs: 200, capMs: 5_000, maxExponent: 5 };

/**
 * When an offset moves: each partition's contiguous watermark (watermark.ts) advances as its events settle, and
 * `commit` sends every moved watermark — one commit at a time, later moves coalescing into the next. A failed
 * commit is not lost: while the consumer runs, the loop tries again after a backoff (COMMIT_RETRY) until it goes
 * through, carrying whatever moved meanwhile — an idle consumer, whose last events settled, does not wait for a
 * next event to commit them; once stopping, the final commit is tried once and a backoff in progress is cut
 * short. A crash re-reads what was not committed, and the inbox absorbs. A revoked partition is forgotten at
 * once, so no offset is committed for it after revocation.
 *
 *   idle ──commit()──▶ committing ──ok, nothing moved since──▶ idle
 *                         │  ▲
 *                  failed │  │ backoff ends (or stop cuts it short)
 *                         ▼  │
 *                       backoff ──not running──▶ idle (the watermark stays dirty)
 */
export class OffsetCommitter {
  readonly #subscriber: Subscriber;
  readonly #log: Logger;
  readonly #running: () => boolean;
  readonly #partitions = new Map<string, PartitionState>();
  readonly #dirty = new Set<PartitionState>();
  #committing: Promise<void> | null = null;
  #again = false;
  /** Ends the backoff after a failed commit early (set while one runs). */
  #wake: (() => void) | null = null;
  #appliedSinceCommit = false;
  #commits = 0;

  /** `running`: while true a failed commit is retried after a backoff; while stopping, once is enough. */
  constructor(subscriber: Subscriber, log: Logger, running: () => boolean) {
    this.#subscriber = subscriber;
    this.#log = log;
    this.#running = running;
  }

  /** Commits sent successfully so far. */
  get commits(): number {
    return this.#commits;
  }

  /** The state of an assigned partition, created on its first record. */
  partition(topic: string, partition: number): PartitionState {
    const key = partitionKey(topic, partition);
    let part = this.#partitions.get(key);
    if (!part) {
      part = { key, topic, partition, watermark: new Watermark(), highest: -1n, revoked: false, committed: null };
      this.#partitions.set(key, part);
    }
    return part;
  }

  /** Tracks a received offset; false when it is already held (fetched again after a rebalance). */
  track(part: PartitionState, offset: bigint): boolean {
    if (offset <= part.highest) return false;
    part.highest = offset;
    part.watermark.track(offset);
    return true;
  }

  /** An event's outcome is durable; its partition is committed with the next commit if the watermark moved. */
  settle(part: PartitionState, offset: bigint): void {
    if (!part.revoked && part.watermark.settle(offset)) this.#dirty.add(part);
  }

  /** An application's effect was committed since the last offset commit (a crash boundary the fault suite names). */
  noteApplied(): void {
    this.#appliedSinceCommit = true;
  }

  /** Forgets every partition not in `assigned`; returns the revoked ones. */
  revokeAllBut(assigned: Set<string>): PartitionState[] {
    const revoked = [...this.#partitions.values()].filter((p) => !assigned.has(p.key));
    for (const part of revoked) {
      part.revoked = true;
      this.#partitions.delete(part.key);
      this.#dirty.delete(part);
    }
    return revoked;
  }

  /**
   * Commits every moved watermark; one commit at a time, later moves coalesce into the next. Called once the
   * consumer stops running (its final commit), it also cuts a retry's backoff short.
   */
  commit(): Promise<void> {
    if (this.#committing) {
      this.#again = true;
      if (!this.#running()) this.#wake?.();
      return this.#committing;
    }
    this.#committing = this.#commitLoop().finally(() => {
      this.#committing = null;
    });
    return this.#committing;
  }

  async #commitLoop(): Promise<void> {
    let failures = 0;
    do {
      this.#again = false;
      const moved = this.#takeMoved();
      if (moved.length === 0) continue;
      if (this.#appliedSinceCommit) failpoint('consumer.after-commit-before-offset');
      this.#appliedSinceCommit = false;
      try {
        await this.#subscriber.commit(
          moved.map(([part, next]) => ({ topic: part.topic, partition: part.partition, offset: next.toString() })),
        );
        this.#commits++;
        failures = 0;
        for (const [part, next] of moved) part.committed = next;
      } catch (cause) {
        for (const [part] of moved) if (!part.revoked) this.#dirty.add(part);
        if (!this.#running()) {
          this.#log.warn({ err: String(cause) }, 'offset commit failed while stopping; a restart re-reads');
          break;
        }
        const delayMs = backoffDelayMs(failures++, COMMIT_RETRY);
        this.#log.warn({ err: String(cause), failures, retryInMs: delayMs }, 'offset commit failed; retrying');
        await this.#backoff(delayMs);
        // Again, whether or not anything settled meanwhile: the offsets that failed are still to commit.
        this.#again = true;
      }
    } while (this.#again);
  }

  #backoff(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.#wake = null;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.#wake = done;
    });
  }

  #takeMoved(): Array<[PartitionState, bigint]> {
    const moved: Array<[PartitionState, bigint]> = [];
    for (const part of this.#dirty) {
      const next = part.watermark.committable();
      if (part.revoked || next === null || next === part.committed) continue;
      moved.push([part, next]);
    }
    this.#dirty.clear();
    return moved;
  }
}

/** The map key of a partition (topic names cannot hold NUL). */
export function partitionKey(topic: string, partition: number): string {
  return `${topic}\u0000${partition}`;
}

export function partitionOfKey(key: string): TopicPartition {
  const at = key.lastIndexOf('\u0000');
  return { topic: key.slice(0, at), partition: Number(key.slice(at + 1)) };
}
