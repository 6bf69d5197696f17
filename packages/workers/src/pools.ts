import { Piscina } from 'piscina';
import type { CycleResult, LaneExecutor, LaneTask } from '@postbox/engine';
import type { PublishWorkerData } from './publish-worker-data.ts';

export interface PublishPoolOptions extends Omit<PublishWorkerData, 'databasePoolSize'> {
  /** Worker threads, each with its own producer. @defaultValue 2 */
  threads?: number;
  /** Per-thread PostgreSQL connections. @defaultValue 2 */
  databasePoolSize?: number;
}

/**
 * A LaneExecutor backed by a fixed piscina pool. Threads live as long as the pool (a long idleTimeout: an idle
 * thread that ended would drop its producer and pool), the queue is bounded, and atomics are off so a thread
 * waiting for its next task keeps serving its sockets.
 */
export function createPublishPool(options: PublishPoolOptions): LaneExecutor {
  const threads = options.threads ?? 2;
  const workerData: PublishWorkerData = {
    databaseUrl: options.databaseUrl,
    databasePoolSize: options.databasePoolSize ?? 2,
    kafka: options.kafka,
    relay: options.relay,
  };
  const pool = new Piscina({
    filename: new URL('./publish.worker.ts', import.meta.url).href,
    workerData,
    minThreads: threads,
    maxThreads: threads,
    idleTimeout: 24 * 60 * 60 * 1000,
    maxQueue: threads * 64,
    concurrentTasksPerWorker: 1,
    atomics: 'disabled',
  });
  let closing: Promise<void> | null = null;
  return {
    run: (task: LaneTask) => pool.run(task) as Promise<CycleResult>,
    close() {
      closing ??= pool.close().then(
        () => pool.destroy(),
        () => pool.destroy(),
      );
      return closing;
    },
  };
}
