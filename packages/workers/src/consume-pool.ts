import type { ConsumerDefinition } from '@postbox/engine';
import type { ConsumeExecutor, ConsumeTask, ConsumeTaskResult } from '@postbox/engine/runtime';
import type { ConsumeWorkerData } from './consume-worker-data.ts';
import { fixedPool } from './fixed-pool.ts';
import { ThreadTelemetry } from './thread-telemetry.ts';

export interface ConsumePoolOptions {
  databaseUrl: string;
  definition: ConsumerDefinition;
}

/**
 * A ConsumeExecutor backed by a fixed piscina pool of `definition.limits.threads` threads, each loading the
 * handler module once and owning a PostgreSQL pool. The consumer keeps at most two tasks per thread in flight, so
 * the second is queued while the first commits; the values buffer is transferred, not copied.
 */
export function createConsumePool(options: ConsumePoolOptions): ConsumeExecutor {
  const threads = options.definition.limits.threads;
  const telemetry = new ThreadTelemetry('consumer');
  const workerData: ConsumeWorkerData = {
    databaseUrl: options.databaseUrl,
    definition: options.definition,
    telemetry: telemetry.options,
  };
  const { pool, close } = fixedPool(
    new URL('./consume.worker.ts', import.meta.url),
    workerData,
    threads,
    threads * 4,
    telemetry,
    options.definition.limits.workerHeapMb,
  );
  return {
    concurrency: threads,
    run: (task: ConsumeTask) =>
      pool.run(task, { transferList: [task.values.buffer as ArrayBuffer] }) as Promise<ConsumeTaskResult>,
    close,
  };
}
