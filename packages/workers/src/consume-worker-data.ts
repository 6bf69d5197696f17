import type { ConsumerDefinition } from '@postbox/engine';
import type { ThreadTelemetryOptions } from './thread-telemetry.ts';

/** What a consume worker thread needs to open its pool and load the handler. Plain data: it is structured-cloned. */
export interface ConsumeWorkerData {
  databaseUrl: string;
  /** The payload key ring as its spec (formatPayloadKeys), or null: failures and retries stored in clear. */
  payloadKeys: string | null;
  definition: ConsumerDefinition;
  /** The thread starts its own tracing SDK when OTEL_* asks for it (thread-telemetry.ts). */
  telemetry?: ThreadTelemetryOptions;
}
