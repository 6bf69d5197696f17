import type { ConsumerDefinition } from '@postbox/engine';

/** What a consume worker thread needs to open its pool and load the handler. Plain data: it is structured-cloned. */
export interface ConsumeWorkerData {
  databaseUrl: string;
  definition: ConsumerDefinition;
}
