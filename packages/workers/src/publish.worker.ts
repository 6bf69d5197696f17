// Piscina worker: hosts the engine's relay cycle. Each thread owns its PostgreSQL pool and its broker publisher,
// opened once when the thread starts; a task is one lane batch (claim → publish → settle), so no rows cross
// the thread boundary, only the small task and its counts.
import { workerData } from 'node:worker_threads';
import { connect } from '@postbox/engine';
import { runLaneCycle, type LaneTask } from '@postbox/engine/runtime';
import { createPublisher } from './broker.ts';
import type { PublishWorkerData } from './publish-worker-data.ts';
import { startThreadTelemetry } from './thread-telemetry.ts';

const data = workerData as PublishWorkerData;

async function open() {
  await startThreadTelemetry(data.telemetry, process.env);
  const sql = connect({ url: data.databaseUrl, max: data.databasePoolSize, applicationName: 'postbox-relay-worker' });
  const publisher = createPublisher(data.broker, new Map(data.partitions), 'relay');
  return (task: LaneTask) => runLaneCycle({ sql, publisher, options: data.relay }, task);
}

export default open();
