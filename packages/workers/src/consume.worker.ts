// Piscina worker: hosts the engine's consume step. Each thread loads the consumer's handler module once and owns
// its PostgreSQL pool (limits.databasePoolSize); a task is one packed batch of records of distinct aggregates,
// run in one engine-owned transaction (see engine consumer/consume-step.ts). Only bytes and counts cross over.
import { workerData } from 'node:worker_threads';
import { createWaker, parsePayloadKeys } from '@postbox/engine';
import { consumeBatch, consumerSql, loadHandlerModule, type ConsumeTask } from '@postbox/engine/runtime';
import type { ConsumeWorkerData } from './consume-worker-data.ts';
import { startThreadTelemetry } from './thread-telemetry.ts';

const data = workerData as ConsumeWorkerData;

async function open() {
  await startThreadTelemetry(data.telemetry, process.env);
  const { definition } = data;
  const { handler, batch } = await loadHandlerModule(definition.handler, definition.db);
  const sql = consumerSql(definition, data.databaseUrl);
  // A handler that enqueues (a saga participant, a chained event) gets its rows announced after the commit.
  const waker = createWaker(sql);
  const payloadKeys = parsePayloadKeys(data.payloadKeys ?? undefined);
  return (task: ConsumeTask) =>
    consumeBatch({ sql, handler, batchHandler: batch, definition, waker, payloadKeys }, task);
}

export default open();
