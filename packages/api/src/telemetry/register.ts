// Preload for scripts that are not Postbox entry files (bench, one-off tools):
//   node --import ./packages/api/src/telemetry/register.ts bench/src/consumer-e2e.ts
// starts the main thread's SDK from OTEL_* / POSTBOX_METRICS_PORT (role from POSTBOX_ROLE) and flushes it when
// the event loop empties. Worker threads inherit --import; they skip this and start their own SDK (thread-telemetry.ts).
import { isMainThread } from 'node:worker_threads';
import { createLogger } from '@postbox/engine';
import { startTelemetry } from './sdk.ts';

if (isMainThread) {
  const log = createLogger({ level: process.env.LOG_LEVEL ?? 'warn', name: 'postbox-telemetry' });
  const telemetry = await startTelemetry(process.env.POSTBOX_ROLE ?? 'script', { log });
  process.once('beforeExit', () => void telemetry.shutdown());
}
