import type { Queryable } from '../db/connect.ts';
import { ConfigError } from '../errors.ts';
import type { EffectFacts } from '../records/observation.ts';

/**
 * Where the verifier finds a consumer's side effects: a query over the consumer's own tables (only its handler
 * knows what an effect is). `$1`, when the query uses it, is the consumer's name.
 * - log: one row per side effect, in the order they happened; columns event_id, aggregate_id, aggregate_version.
 *   E.g. `SELECT event_id, aggregate_id, version AS aggregate_version FROM applied_log WHERE consumer = $1 ORDER BY seq`.
 * - counts: one row per aggregate of a projection that counts its applied events; columns aggregate_id, version,
 *   applied_count. E.g. `SELECT order_id AS aggregate_id, version, applied_count FROM order_projection`.
 */
export type EffectSource = { kind: 'log'; query: string } | { kind: 'counts'; query: string };

const COLUMNS = {
  log: ['event_id', 'aggregate_id', 'aggregate_version'],
  counts: ['aggregate_id', 'version', 'applied_count'],
} as const;

export async function readEffects(sql: Queryable, source: EffectSource, consumer: string): Promise<EffectFacts> {
  let rows: Array<Record<string, unknown>>;
  try {
    rows = await sql.unsafe(source.query, /\$1\b/.test(source.query) ? [consumer] : []);
  } catch (cause) {
    throw new ConfigError(
      `the ${source.kind} effects query of consumer ${consumer} failed: ${(cause as Error).message} (query: ${source.query})`,
      { cause },
    );
  }
  const missing = rows.length === 0 ? [] : COLUMNS[source.kind].filter((c) => !(c in rows[0]!));
  if (missing.length > 0) {
    throw new ConfigError(
      `the ${source.kind} effects query of consumer ${consumer} must return the columns ${COLUMNS[source.kind].join(', ')}; missing: ${missing.join(', ')}`,
    );
  }
  if (source.kind === 'log') {
    return {
      kind: 'log',
      rows: rows.map((r) => ({
        eventId: String(r.event_id),
        aggregateId: String(r.aggregate_id),
        version: Number(r.aggregate_version),
      })),
    };
  }
  return {
    kind: 'counts',
    rows: rows.map((r) => ({
      aggregateId: String(r.aggregate_id),
      version: Number(r.version),
      count: Number(r.applied_count),
    })),
  };
}
