import { GraphQLError } from 'graphql';

/** A client's mistake, named by the argument it was in; passes error masking as BAD_USER_INPUT. */
export function invalid(path: string, rule: string): GraphQLError {
  return new GraphQLError(`${path}: ${rule}`, { extensions: { code: 'BAD_USER_INPUT', argument: path } });
}

const PRINTABLE = /^[^\p{Cc}\p{Cs}]*$/u;

/** A filter or name: at most `max` characters, no control characters (NUL never reaches PostgreSQL). */
export function text(path: string, value: string | null | undefined, max = 200): string | undefined {
  if (value === null || value === undefined) return undefined;
  if (value.length > max) throw invalid(path, `must be at most ${max} characters (got ${value.length})`);
  if (!PRINTABLE.test(value)) throw invalid(path, 'must not contain control characters');
  return value;
}

export function requiredText(path: string, value: string, max = 500): string {
  const v = text(path, value, max)!;
  if (v.trim().length === 0) throw invalid(path, 'must not be empty');
  return v;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function uuid(path: string, value: string, what = 'an event id'): string {
  if (!UUID.test(value)) throw invalid(path, `must be a UUID (${what})`);
  return value.toLowerCase();
}

export const MAX_PAGE = 100;

/** Page size: 1…100, default 20; backwards paging is not offered (keyset pages, newest first). */
export function pageSize(args: { first?: number | null; last?: number | null; before?: string | null }): number {
  if (args.last != null || args.before != null)
    throw invalid('last/before', 'backward paging is not supported; use first/after');
  const first = args.first ?? 20;
  if (!Number.isInteger(first) || first < 1 || first > MAX_PAGE)
    throw invalid('first', `must be 1…${MAX_PAGE} (got ${first})`);
  return first;
}

export function encodeCursor(kind: string, id: number): string {
  return Buffer.from(`${kind}:${id}`, 'utf8').toString('base64url');
}

export function decodeCursor(kind: string, cursor: string | null | undefined): number | null {
  if (cursor === null || cursor === undefined) return null;
  const raw = cursor.length <= 64 ? Buffer.from(cursor, 'base64url').toString('utf8') : '';
  const match = new RegExp(`^${kind}:([1-9][0-9]{0,15})$`).exec(raw);
  if (!match) throw invalid('after', 'is not a cursor this connection gave out');
  return Number(match[1]);
}

export function timeRange(
  since: Date | null | undefined,
  until: Date | null | undefined,
): { since?: Date; until?: Date } {
  if (since && until && since >= until) throw invalid('since', 'must be before until');
  return { ...(since ? { since } : {}), ...(until ? { until } : {}) };
}
