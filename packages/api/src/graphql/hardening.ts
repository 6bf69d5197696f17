import { createHash } from 'node:crypto';
import { getOperationAST, GraphQLError } from 'graphql';
import type { Plugin } from 'graphql-yoga';
import { bearerToken } from './auth.ts';
import type { ApiContext } from './context.ts';

/**
 * Headers on every answer of the control plane: nothing sniffed, framed, cached or referred. GraphiQL's page sets
 * its own content security policy (graphiql.ts); every other answer is data and may load nothing.
 */
export function securityHeaders(): Plugin {
  return {
    onResponse({ response }) {
      const h = response.headers;
      h.set('x-content-type-options', 'nosniff');
      h.set('x-frame-options', 'DENY');
      h.set('referrer-policy', 'no-referrer');
      h.set('cache-control', 'no-store');
      if (!h.has('content-security-policy'))
        h.set('content-security-policy', "default-src 'none'; frame-ancestors 'none'");
    },
  };
}

/** A token bucket per key: `perMinute` tokens, refilled evenly; bounded in keys (the oldest is forgotten). */
export class RateBuckets {
  readonly #perMinute: number;
  readonly #buckets = new Map<string, { tokens: number; at: number }>();
  readonly #maxKeys: number;

  constructor(perMinute: number, maxKeys = 10_000) {
    this.#perMinute = perMinute;
    this.#maxKeys = maxKeys;
  }

  /** Takes one token for `key`; returns 0 when taken, else the seconds until one is there. */
  take(key: string, now = Date.now()): number {
    const b = this.#buckets.get(key) ?? { tokens: this.#perMinute, at: now };
    b.tokens = Math.min(this.#perMinute, b.tokens + ((now - b.at) / 60_000) * this.#perMinute);
    b.at = now;
    this.#buckets.delete(key);
    this.#buckets.set(key, b);
    if (this.#buckets.size > this.#maxKeys) this.#buckets.delete(this.#buckets.keys().next().value!);
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return 0;
    }
    return Math.ceil(((1 - b.tokens) * 60) / this.#perMinute);
  }
}

/**
 * Mutations per bearer token (its hash; callers without a valid token share one bucket): past the rate the operation is
 * not executed and answers RATE_LIMITED (HTTP 429, Retry-After). Queries are not counted: they are bounded by
 * graphql-armor's cost limit instead.
 */
export function mutationRateLimit(perMinute: number): Plugin<ApiContext & { request: Request }> {
  const buckets = new RateBuckets(perMinute);
  return {
    onExecute({ args, setResultAndStopExecution }) {
      const op = getOperationAST(args.document, args.operationName);
      if (op?.operation !== 'mutation') return;
      // The token itself, not the header's spelling (`bearer  T` is `Bearer T`); callers without a valid token
      // share one bucket, so made-up tokens cannot crowd real ones out of the map.
      const token = bearerToken(args.contextValue.request.headers.get('authorization'));
      const key =
        token === null || args.contextValue.caller.actor === 'anonymous'
          ? 'anonymous'
          : createHash('sha256').update(token).digest('base64url');
      const wait = buckets.take(key);
      if (wait === 0) return;
      setResultAndStopExecution({
        errors: [
          new GraphQLError(`mutation rate limit: ${perMinute} a minute per token; try again in ${wait} s`, {
            extensions: { code: 'RATE_LIMITED', http: { status: 429, headers: { 'retry-after': String(wait) } } },
          }),
        ],
      });
    },
  };
}
