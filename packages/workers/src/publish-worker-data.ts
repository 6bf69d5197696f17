import type { RelayOptions } from '@postbox/engine/runtime';
import type { BrokerConnection } from './broker.ts';
import type { ThreadTelemetryOptions } from './thread-telemetry.ts';

/** What a publish worker thread needs to open its own connections. Plain data: it is structured-cloned. */
export interface PublishWorkerData {
  databaseUrl: string;
  /** One connection per cycle the thread runs at once, and one spare for a settle after a slow publish. */
  databasePoolSize: number;
  broker: BrokerConnection;
  /** Partitions per topic, as the broker has them (NATS needs them to place a key). */
  partitions: Array<[string, number]>;
  relay: RelayOptions;
  /** The thread starts its own tracing SDK when OTEL_* asks for it (thread-telemetry.ts). */
  telemetry?: ThreadTelemetryOptions;
}
