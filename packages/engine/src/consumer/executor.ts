import type { PayloadKeyRing } from '../crypto/payload-keys.ts';
import { createWaker } from '../outbox/wake.ts';
import { consumeBatch } from './consume-step.ts';
import type { ConsumerDefinition } from './definition.ts';
import { loadHandlerModule } from './handler-module.ts';
import { consumerSql } from './pool.ts';
import type { ConsumeTask, ConsumeTaskResult } from '../records/wire.ts';

/** Runs consume tasks somewhere: a piscina pool (@postbox/workers createConsumePool) or this thread. */
export interface ConsumeExecutor {
  /** Tasks that may run at once (the pool's threads). */
  readonly concurrency: number;
  run(task: ConsumeTask): Promise<ConsumeTaskResult>;
  close(): Promise<void>;
}

/** The consume step on the calling thread, with its own pool: for tests, debugging and threads = 0. */
export function inlineConsumeExecutor(
  definition: ConsumerDefinition,
  databaseUrl: string,
  payloadKeys: PayloadKeyRing | null = null,
): ConsumeExecutor {
  const sql = consumerSql(definition, databaseUrl);
  const waker = createWaker(sql);
  const handlers = loadHandlerModule(definition.handler, definition.db);
  let closed: Promise<void> | null = null;
  return {
    concurrency: 1,
    run: async (task) => {
      const { handler, batch } = await handlers;
      return consumeBatch({ sql, handler, batchHandler: batch, definition, waker, payloadKeys }, task);
    },
    close() {
      closed ??= waker.flush().then(() => sql.end({ timeout: 5 }));
      return closed;
    },
  };
}
