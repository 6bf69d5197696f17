import { formatPayloadKeys, siblingModule, type ConsumerDefinition, type PayloadKeyRing } from '@postbox/engine';
import type { ConsumeExecutor, ConsumeTask, ConsumeTaskResult } from '@postbox/engine/runtime';
import type { ConsumeWorkerData } from './consume-worker-data.ts';
import { fixedPool } from './fixed-pool.ts';
import { ThreadTelemetry } from './thread-telemetry.ts';

export interface ConsumePoolOptions {
  databaseUrl: string;
  definition: ConsumerDefinition;
  /** Seals what the failure store and the retry ledger keep. @defaultValue null: stored in clear */
  payloadKeys?: PayloadKeyRing | null;
}

/**
 * Two transactions per thread at once: while one waits for PostgreSQL (a task is mostly round trips), the thread
 * parses and prepares the other. The consumer keeps at most two tasks per thread in flight, and their events are
 * of distinct aggregates, so the two never contend for a row; each has its own connection (databasePoolSize ≥ 2).
 */
const TASKS_PER_THREAD = 2;

/**
 * A ConsumeExecutor backed by a fixed piscina pool of `definition.limits.threads` threads, each loading the
 * handler module once and owning a PostgreSQL pool, running up to two tasks at once; the values buffer is
 * transferred, not copied.
 */
export function createConsumePool(options: ConsumePoolOptions): ConsumeExecutor {
  const threads = options.definition.limits.threads;
  const telemetry = new ThreadTelemetry('consumer');
  const workerData: ConsumeWorkerData = {
    databaseUrl: options.databaseUrl,
    payloadKeys: options.payloadKeys ? formatPayloadKeys(options.payloadKeys) : null,
    definition: options.definition,
    telemetry: telemetry.options,
  };
  const { pool, close } = fixedPool(siblingModule('./consume.worker.ts', import.meta.url), workerData, {
    threads,
    maxQueue: threads * 4,
    tasksPerThread: TASKS_PER_THREAD,
    telemetry,
    heapMb: options.definition.limits.workerHeapMb,
  });
  return {
    concurrency: threads,
    run: (task: ConsumeTask) =>
      pool.run(task, { transferList: [task.values.buffer as ArrayBuffer] }) as Promise<ConsumeTaskResult>,
    close,
  };
}
