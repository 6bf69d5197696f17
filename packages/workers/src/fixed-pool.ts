import { Piscina } from 'piscina';
import type { ThreadTelemetry } from './thread-telemetry.ts';

/** A piscina pool of a fixed size and a way to close it once (drain, then destroy even if draining failed). */
export interface FixedPool {
  pool: Piscina;
  close(): Promise<void>;
}

export interface FixedPoolOptions {
  threads: number;
  /** Tasks queued beyond those running. */
  maxQueue: number;
  /** Tasks one thread runs at once (async tasks interleave on its event loop). @defaultValue 1 */
  tasksPerThread?: number;
  telemetry?: ThreadTelemetry;
  /** Old-generation heap per thread. @defaultValue 256 */
  heapMb?: number;
}

/**
 * Each thread's old-generation heap is bounded (`heapMb`; young generation 8 MiB). Threads live as long as the
 * pool (a long idleTimeout: an idle thread that ended would drop its producer, database pool and handler), the
 * queue is bounded, and atomics are off so a thread waiting for its next task keeps serving its sockets
 * (piscina's default 'sync' parks the thread between tasks).
 */
export function fixedPool(worker: URL, workerData: unknown, options: FixedPoolOptions): FixedPool {
  const { threads, maxQueue, tasksPerThread = 1, telemetry, heapMb = 256 } = options;
  const pool = new Piscina({
    filename: worker.href,
    workerData,
    minThreads: threads,
    maxThreads: threads,
    idleTimeout: 24 * 60 * 60 * 1000,
    maxQueue,
    concurrentTasksPerWorker: tasksPerThread,
    atomics: 'disabled',
    // V8 sizes a thread's heap from the machine's memory and collects lazily up to there: bounded, the relay's and
    // the consumer's threads hold what they use, not ≈ 300 MiB of garbage each (the backlog bench).
    resourceLimits: { maxYoungGenerationSizeMb: 8, maxOldGenerationSizeMb: heapMb },
  });
  let closing: Promise<void> | null = null;
  return {
    pool,
    close() {
      // The threads' spans are flushed while the threads still live (close() ends them).
      closing ??= (telemetry ? telemetry.flush() : Promise.resolve())
        .then(() => pool.close())
        .then(
          () => pool.destroy(),
          () => pool.destroy(),
        );
      return closing;
    },
  };
}
