import { createHash, timingSafeEqual } from 'node:crypto';
import { hash, type ApiToken, type Scope } from '../config/api.ts';

export interface Caller {
  /** The audit log's actor; "anonymous" without a valid token. */
  actor: string;
  scopes: ReadonlySet<Scope>;
}

const ANONYMOUS: Caller = { actor: 'anonymous', scopes: new Set() };

/** The caller of a request from its `Authorization: Bearer …` header; constant-time comparison of hashes. */
export function callerOf(header: string | null, tokens: ApiToken[]): Caller {
  const token = bearerToken(header);
  if (token === null) return ANONYMOUS;
  const digest = hash(token);
  let found: ApiToken | undefined;
  for (const t of tokens) if (timingSafeEqual(t.sha256, digest)) found = t;
  return found ? { actor: found.actor, scopes: found.scopes } : ANONYMOUS;
}

/** The token of an `Authorization: Bearer …` header, however the scheme is spelled and spaced; null without one. */
export function bearerToken(header: string | null): string | null {
  return /^Bearer\s+(\S+)$/i.exec(header ?? '')?.[1] ?? null;
}

/**
 * What per-token limits (mutation rate, open subscriptions) count against: the token itself (its hash), not the
 * header's spelling (`bearer  T` is `Bearer T`). Callers without a valid token share one key, so made-up tokens
 * cannot crowd real ones out of a bounded map.
 */
export function tokenKey(header: string | null, caller: Caller): string {
  const token = bearerToken(header);
  if (token === null || caller.actor === 'anonymous') return 'anonymous';
  return createHash('sha256').update(token).digest('base64url');
}
