import type { CycleResult, LaneExecutor, LaneTask } from '@postbox/engine/runtime';
import { fixedPool } from './fixed-pool.ts';
import type { PublishWorkerData } from './publish-worker-data.ts';
import { ThreadTelemetry } from './thread-telemetry.ts';

export interface PublishPoolOptions extends Omit<PublishWorkerData, 'databasePoolSize' | 'telemetry' | 'partitions'> {
  /** Partitions per topic, as ensureBrokerTopics returned them (NATS places keys by them). */
  partitions?: ReadonlyMap<string, number>;
  /** Worker threads, each with its own producer. @defaultValue 2 */
  threads?: number;
  /** Per-thread PostgreSQL connections. @defaultValue 2 */
  databasePoolSize?: number;
}

/** A LaneExecutor backed by a fixed piscina pool; each thread owns a publisher and a small PostgreSQL pool. */
export function createPublishPool(options: PublishPoolOptions): LaneExecutor {
  const threads = options.threads ?? 2;
  const telemetry = new ThreadTelemetry('relay');
  const workerData: PublishWorkerData = {
    databaseUrl: options.databaseUrl,
    databasePoolSize: options.databasePoolSize ?? 2,
    broker: options.broker,
    partitions: [...(options.partitions ?? [])],
    relay: options.relay,
    telemetry: telemetry.options,
  };
  const { pool, close } = fixedPool(new URL('./publish.worker.ts', import.meta.url), workerData, {
    threads,
    maxQueue: threads * 64,
    telemetry,
  });
  return { run: (task: LaneTask) => pool.run(task) as Promise<CycleResult>, close };
}
