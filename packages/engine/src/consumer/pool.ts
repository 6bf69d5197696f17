import { connect, type Sql } from '../db/connect.ts';
import type { ConsumerDefinition } from './definition.ts';

/**
 * The PostgreSQL pool a consume step runs on (one per worker thread, or the inline executor's): the consumer's
 * pool size, and statement_timeout = limits.handlerTimeoutMs, so no statement of an engine-owned transaction
 * (the handler's included) can hold its connection, locks and aggregate longer than the handler may take.
 */
export function consumerSql(definition: ConsumerDefinition, databaseUrl: string): Sql {
  return connect({
    url: databaseUrl,
    max: definition.limits.databasePoolSize,
    applicationName: `postbox-consumer-${definition.name}`,
    settings: { statement_timeout: definition.limits.handlerTimeoutMs },
  });
}
