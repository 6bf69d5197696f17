// Piscina worker: hosts the engine's consume step. Each thread loads the consumer's handler module once and owns
// its PostgreSQL pool (limits.databasePoolSize); a task is one packed batch of records of distinct aggregates,
// run in one engine-owned transaction (see engine consumer/apply-batch.ts). Only bytes and counts cross over.
import { workerData } from 'node:worker_threads';
import { connect, consumeBatch, loadHandler, type ConsumeTask } from '@postbox/engine';
import type { ConsumeWorkerData } from './consume-worker-data.ts';

const data = workerData as ConsumeWorkerData;

async function open() {
  const { definition } = data;
  const handler = await loadHandler(definition.handler);
  const sql = connect({ url: data.databaseUrl, max: definition.limits.databasePoolSize, applicationName: `postbox-consumer-${definition.name}` });
  return (task: ConsumeTask) => consumeBatch({ sql, handler, definition }, task);
}

export default open();
