import type { ConsumerDefinition } from '@postbox/engine';
import type { ThreadTelemetryOptions } from './thread-telemetry.ts';

/** What a consume worker thread needs to open its pool and load the handler. Plain data: it is structured-cloned. */
export interface ConsumeWorkerData {
  databaseUrl: string;
  definition: ConsumerDefinition;
  /** The thread starts its own tracing SDK when OTEL_* asks for it (thread-telemetry.ts). */
  telemetry?: ThreadTelemetryOptions;
}
