import postgres from 'postgres';

export type Sql = postgres.Sql;
export type Tx = postgres.TransactionSql;
/** Either a pool or a transaction: query modules take this so they run inside the caller's transaction. */
export type Queryable = Sql | Tx;

export interface ConnectOptions {
  url: string;
  /** @defaultValue 10 */
  max?: number;
  /** Shown in pg_stat_activity, so operators can tell relay, consumer and API connections apart. */
  applicationName?: string;
  /** Server settings for every connection of the pool (sent at connect), e.g. statement_timeout. */
  settings?: Record<string, string | number>;
  /** Passed to postgres.js unchanged (TLS: `ssl`, timeouts, …). */
  extra?: postgres.Options<Record<string, postgres.PostgresType>>;
}

/** A postgres.js pool with the settings Postbox relies on: bounded size, no notices on stdout, UTC. */
export function connect(options: ConnectOptions): Sql {
  return postgres(options.url, {
    max: options.max ?? 10,
    idle_timeout: 60,
    connect_timeout: 10,
    onnotice: () => {},
    connection: { application_name: options.applicationName ?? 'postbox', TimeZone: 'UTC', ...options.settings },
    ...options.extra,
  });
}
