import type { KafkaConnection } from '@postbox/engine/kafka';
import type { RelayOptions } from '@postbox/engine/runtime';
import type { ThreadTelemetryOptions } from './thread-telemetry.ts';

/** What a publish worker thread needs to open its own connections. Plain data: it is structured-cloned. */
export interface PublishWorkerData {
  databaseUrl: string;
  /** @defaultValue 2: a thread runs one cycle at a time; one spare for the settle after a slow publish */
  databasePoolSize: number;
  kafka: KafkaConnection;
  relay: RelayOptions;
  /** The thread starts its own tracing SDK when OTEL_* asks for it (thread-telemetry.ts). */
  telemetry?: ThreadTelemetryOptions;
}
