import { type FragmentDefinitionNode, getOperationAST, GraphQLError, Kind, type SelectionNode } from 'graphql';
import type { Plugin } from 'graphql-yoga';
import { tokenKey } from './auth.ts';
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

  /** Takes `n` tokens (1 ≤ n ≤ perMinute) for `key`, all or none; returns 0 when taken, else the seconds until they are there. */
  take(key: string, now = Date.now(), n = 1): number {
    const b = this.#buckets.get(key) ?? { tokens: this.#perMinute, at: now };
    b.tokens = Math.min(this.#perMinute, b.tokens + ((now - b.at) / 60_000) * this.#perMinute);
    b.at = now;
    this.#buckets.delete(key);
    this.#buckets.set(key, b);
    if (this.#buckets.size > this.#maxKeys) this.#buckets.delete(this.#buckets.keys().next().value!);
    if (b.tokens >= n) {
      b.tokens -= n;
      return 0;
    }
    return Math.ceil(((n - b.tokens) * 60) / this.#perMinute);
  }
}

/**
 * The mutation fields an operation runs: its top-level selections, through fragments, so `mutation { a: retryNow
 * b: retryNow }` is two. Every field counts, even under @skip/@include: the cost is checked before execution.
 */
export function mutationFieldCount(
  selections: readonly SelectionNode[],
  fragments: ReadonlyMap<string, FragmentDefinitionNode>,
  seen = new Set<string>(),
): number {
  let n = 0;
  for (const s of selections) {
    if (s.kind === Kind.FIELD) n += s.name.value.startsWith('__') ? 0 : 1;
    else if (s.kind === Kind.INLINE_FRAGMENT) n += mutationFieldCount(s.selectionSet.selections, fragments, seen);
    else if (!seen.has(s.name.value)) {
      seen.add(s.name.value);
      const f = fragments.get(s.name.value);
      if (f) n += mutationFieldCount(f.selectionSet.selections, fragments, seen);
    }
  }
  return n;
}

/**
 * Mutation fields per bearer token (tokenKey): an operation of N mutation fields (aliases included) takes N from
 * the token's bucket, all or none; past the rate it is not executed and answers RATE_LIMITED (HTTP 429,
 * Retry-After). Queries are not counted: graphql-armor's cost limit bounds them instead.
 */
export function mutationRateLimit(perMinute: number): Plugin<ApiContext & { request: Request }> {
  const buckets = new RateBuckets(perMinute);
  return {
    onExecute({ args, setResultAndStopExecution }) {
      const op = getOperationAST(args.document, args.operationName);
      if (op?.operation !== 'mutation') return;
      const fragments = new Map<string, FragmentDefinitionNode>();
      for (const d of args.document.definitions)
        if (d.kind === Kind.FRAGMENT_DEFINITION) fragments.set(d.name.value, d);
      const n = Math.max(1, mutationFieldCount(op.selectionSet.selections, fragments));
      const refuse = (message: string, headers: Record<string, string>) =>
        setResultAndStopExecution({
          errors: [new GraphQLError(message, { extensions: { code: 'RATE_LIMITED', http: { status: 429, headers } } })],
        });
      if (n > perMinute) {
        refuse(
          `mutation rate limit: ${n} mutations in one operation, more than the ${perMinute} a minute per token`,
          {},
        );
        return;
      }
      const key = tokenKey(args.contextValue.request.headers.get('authorization'), args.contextValue.caller);
      const wait = buckets.take(key, Date.now(), n);
      if (wait === 0) return;
      refuse(`mutation rate limit: ${perMinute} a minute per token; try again in ${wait} s`, {
        'retry-after': String(wait),
      });
    },
  };
}

/**
 * A request body over `maxBytes` is refused (413) however it is framed: a declared Content-Length before anything is
 * read, a chunked body (no length) as soon as what arrived passes the limit; the rest is never read.
 */
export function bodyLimit(maxBytes: number): Plugin {
  return {
    async onRequest({ request, endResponse, setRequest, fetchAPI }) {
      const tooLarge = (what: string) =>
        endResponse(
          new fetchAPI.Response(
            JSON.stringify({
              errors: [
                { message: `${what} is over the limit of ${maxBytes}`, extensions: { code: 'PAYLOAD_TOO_LARGE' } },
              ],
            }),
            { status: 413, headers: { 'content-type': 'application/json' } },
          ),
        );
      const declared = request.headers.get('content-length');
      if (declared !== null) {
        // Node's parser holds a declared body to its length, so only the declaration needs checking.
        if (Number(declared) > maxBytes) tooLarge(`request body of ${declared} bytes`);
        return;
      }
      if (request.body === null) return;
      const body = await readAtMost(request.body, maxBytes);
      if (body === null) {
        tooLarge('the request body (sent without Content-Length)');
        return;
      }
      setRequest(
        new fetchAPI.Request(request.url, {
          method: request.method,
          headers: request.headers,
          body,
          // The original's signal: a client that hangs up still ends its subscription.
          signal: request.signal,
        }),
      );
    },
  };
}

/** The whole stream if it holds at most `maxBytes`; null (and the stream cancelled) as soon as it holds more. */
async function readAtMost(stream: ReadableStream<Uint8Array>, maxBytes: number): Promise<Buffer<ArrayBuffer> | null> {
  const reader = stream.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > maxBytes) {
      await reader.cancel().catch(() => {});
      return null;
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks);
}
