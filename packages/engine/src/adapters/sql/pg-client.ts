import type postgres from 'postgres';
import { ConfigError } from '../../errors.ts';
import { bindTransaction } from '../../db/bound-transaction.ts';

/** A query as node-postgres takes it: text and values, or a config object. */
export interface PgQueryConfig {
  text: string;
  values?: readonly unknown[];
  /** 'array': each row as an array of column values (what Drizzle asks for). */
  rowMode?: 'array';
  /** Per-query type parsers, as pg's: when given, every column is parsed by them from PostgreSQL's text. */
  types?: { getTypeParser(oid: number, format?: string): (text: string) => unknown };
}

export interface PgQueryResult<Row = Record<string, unknown>> {
  rows: Row[];
  rowCount: number | null;
  command: string;
  fields: Array<{ name: string; dataTypeID: number }>;
}

/** The part of a node-postgres client a handler's repositories use: `query`, and `release` for pool-shaped callers. */
export interface PgCompatibleClient {
  query<Row = Record<string, unknown>>(
    query: string | PgQueryConfig,
    values?: readonly unknown[],
  ): Promise<PgQueryResult<Row>>;
  release(): void;
}

/**
 * Statements that end or start a transaction (after any leading comments): the handler's transaction is Postbox's,
 * so they are refused. ROLLBACK [WORK | TRANSACTION] TO [SAVEPOINT] is a savepoint's and allowed. One statement per
 * call is enforced by PostgreSQL itself (the extended protocol), so nothing can hide behind a first statement.
 */
const TRANSACTION_CONTROL =
  /^\s*(?:(?:--[^\n]*(?:\n|$)|\/\*[\s\S]*?\*\/)\s*)*(begin|start\s+transaction|commit|end|rollback(?!\s+(?:(?:work|transaction)\s+)?to\b)|abort|prepare\s+transaction)\b/i;
/** PostgreSQL's `unknown`: a parameter of this type is resolved as an untyped literal, as pg's text parameters are. */
const UNKNOWN = 705;

/**
 * A node-postgres-shaped client bound to a consumer's transaction (the `tx` a handler receives), so repositories
 * written for pg write in the same transaction as the inbox row. Values are sent as pg sends them (text resolved
 * by PostgreSQL: objects as JSON, arrays as array literals, dates in local time with the offset), rows are parsed by postgres.js
 * (or by the query's own `types`, exactly as pg would). BEGIN, COMMIT and ROLLBACK are refused (SAVEPOINT works).
 */
export function pgClient(tx: postgres.TransactionSql): PgCompatibleClient {
  return bindTransaction(client(tx), tx);
}

function client(tx: postgres.TransactionSql): PgCompatibleClient {
  return {
    async query<Row>(query: string | PgQueryConfig, values?: readonly unknown[]): Promise<PgQueryResult<Row>> {
      const config = typeof query === 'string' ? { text: query, values } : { ...query, values: query.values ?? values };
      if (TRANSACTION_CONTROL.test(config.text))
        throw new ConfigError(
          `the handler runs in Postbox's transaction, which commits with the inbox row: "${TRANSACTION_CONTROL.exec(config.text)![1]}" is not allowed here (a SAVEPOINT is)`,
        );
      const params = (config.values ?? []).map((v) => pgParam(tx, v));
      // simple: false even without parameters: the extended protocol, one statement only.
      const pending = tx.unsafe(config.text, params as never[], { simple: false } as never);
      const result = config.types
        ? await pending.raw()
        : config.rowMode === 'array'
          ? await pending.values()
          : await pending;
      const fields = (result.columns ?? []).map((c) => ({ name: c.name, dataTypeID: c.type }));
      const rows = config.types
        ? (result as unknown as Array<Array<Buffer | null>>).map((row) => parsedRow(row, fields, config))
        : [...(result as unknown as Row[])];
      return { rows: rows as Row[], rowCount: result.count ?? null, command: result.command, fields };
    },
    release() {},
  };
}

function parsedRow(
  row: Array<Buffer | null>,
  fields: Array<{ name: string; dataTypeID: number }>,
  config: PgQueryConfig,
): unknown {
  const values = row.map((raw, i) =>
    raw === null ? null : config.types!.getTypeParser(fields[i]!.dataTypeID, 'text')(raw.toString('utf8')),
  );
  return config.rowMode === 'array' ? values : Object.fromEntries(fields.map((f, i) => [f.name, values[i]]));
}

/** A parameter as node-postgres would send it (utils.prepareValue): text PostgreSQL resolves, or bytes. */
function pgParam(tx: postgres.TransactionSql, value: unknown): unknown {
  if (value === null || value === undefined) return null;
  if (value instanceof Uint8Array) return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  return tx.typed(pgText(value) as never, UNKNOWN);
}

function pgText(value: unknown): string {
  if (value instanceof Date) return pgDate(value);
  if (Array.isArray(value)) return arrayLiteral(value);
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value);
}

function arrayLiteral(values: readonly unknown[]): string {
  const items = values.map((v) => {
    if (v === null || v === undefined) return 'NULL';
    if (Array.isArray(v)) return arrayLiteral(v);
    if (v instanceof Uint8Array) return `"\\\\x${Buffer.from(v).toString('hex')}"`;
    return `"${pgText(v).replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;
  });
  return `{${items.join(',')}}`;
}

/**
 * A Date as pg sends it (utils.dateToString): local time with its UTC offset, so a `timestamp` column (without
 * time zone) stores the local wall-clock time, as it does through pg.
 */
function pgDate(date: Date): string {
  const pad = (n: number, width = 2) => String(n).padStart(width, '0');
  let year = date.getFullYear();
  const bc = year < 1;
  if (bc) year = Math.abs(year) + 1;
  const offset = -date.getTimezoneOffset();
  const sign = offset < 0 ? '-' : '+';
  const abs = Math.abs(offset);
  return (
    `${pad(year, 4)}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}T${pad(date.getHours())}:` +
    `${pad(date.getMinutes())}:${pad(date.getSeconds())}.${pad(date.getMilliseconds(), 3)}` +
    `${sign}${pad(Math.floor(abs / 60))}:${pad(abs % 60)}${bc ? ' BC' : ''}`
  );
}
