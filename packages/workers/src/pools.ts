import { siblingModule } from '@postbox/engine';
import type { CycleResult, LaneExecutor, LaneTask } from '@postbox/engine/runtime';
import { fixedPool } from './fixed-pool.ts';
import type { PublishWorkerData } from './publish-worker-data.ts';
import { ThreadTelemetry } from './thread-telemetry.ts';

export interface PublishPoolOptions extends Omit<PublishWorkerData, 'databasePoolSize' | 'telemetry' | 'partitions'> {
  /** Partitions per topic, as ensureBrokerTopics returned them (NATS places keys by them). */
  partitions?: ReadonlyMap<string, number>;
  /** Worker threads, each with its own producer. @defaultValue 2 */
  threads?: number;
  /** Per-thread PostgreSQL connections. @defaultValue one per cycle the thread runs at once, plus one */
  databasePoolSize?: number;
}

/**
 * Old-generation MiB of a relay thread: a cycle holds at most maxBatchBytes (8 MiB) of events, a few copies of it
 * while they are encoded and sent; a larger bound only lets garbage stay resident (backlog bench).
 */
const RELAY_THREAD_HEAP_MB = 128;

/**
 * A LaneExecutor backed by a fixed piscina pool; each thread owns a publisher and a small PostgreSQL pool.
 * The relay keeps `maxInFlight` cycles going; the threads share them, several at once on one thread, as the main
 * thread runs them when there is no pool. One cycle per thread would serialise claim → publish → mark behind each
 * other: one pool thread relays 0.6× what the main thread does on every broker (bench/RESULTS.md, 2026-12-06).
 */
export function createPublishPool(options: PublishPoolOptions): LaneExecutor {
  const threads = options.threads ?? 2;
  const tasksPerThread = Math.max(1, Math.ceil(options.relay.maxInFlight / threads));
  const telemetry = new ThreadTelemetry('relay');
  const workerData: PublishWorkerData = {
    databaseUrl: options.databaseUrl,
    databasePoolSize: options.databasePoolSize ?? tasksPerThread + 1,
    broker: options.broker,
    partitions: [...(options.partitions ?? [])],
    relay: options.relay,
    telemetry: telemetry.options,
  };
  const { pool, close } = fixedPool(siblingModule('./publish.worker.ts', import.meta.url), workerData, {
    threads,
    maxQueue: threads * 64,
    tasksPerThread,
    telemetry,
    heapMb: RELAY_THREAD_HEAP_MB,
  });
  return { run: (task: LaneTask) => pool.run(task) as Promise<CycleResult>, close };
}
