import { GraphQLError, type ExecutionResult } from 'graphql';
import type { Plugin } from 'graphql-yoga';
import { tokenKey } from './auth.ts';
import type { ApiContext } from './context.ts';

/**
 * Open subscriptions, counted per token and in all. Invariant: every slot taken is given back exactly once, when
 * its stream ends for any reason (the client hangs up, the source ends or fails, the server closes).
 */
export class SubscriptionSlots {
  readonly perToken: number;
  readonly total: number;
  readonly #byKey = new Map<string, number>();
  #open = 0;

  constructor(perToken: number, total: number) {
    this.perToken = perToken;
    this.total = total;
  }

  /** Subscriptions open now. */
  get open(): number {
    return this.#open;
  }

  /** A slot for `key` and the function that gives it back, or why there is none. */
  take(key: string): { release: () => void } | { refused: string } {
    const held = this.#byKey.get(key) ?? 0;
    if (held >= this.perToken)
      return { refused: `subscription limit: ${this.perToken} open subscriptions per token; close one first` };
    if (this.#open >= this.total)
      return { refused: `subscription limit: ${this.total} open subscriptions in all; try again later` };
    this.#byKey.set(key, held + 1);
    this.#open++;
    let released = false;
    return {
      release: () => {
        if (released) return;
        released = true;
        this.#open--;
        const left = (this.#byKey.get(key) ?? 1) - 1;
        if (left === 0) this.#byKey.delete(key);
        else this.#byKey.set(key, left);
      },
    };
  }
}

/**
 * Caps open subscriptions (SubscriptionSlots). It acts on the result of subscribe, so a caller the schema refused
 * (scope-auth runs in subscribe) never holds a slot, and a refused one is answered SUBSCRIPTION_LIMIT before its
 * source is read once.
 */
export function subscriptionLimit(slots: SubscriptionSlots): Plugin<ApiContext & { request: Request }> {
  return {
    onSubscribe() {
      return {
        onSubscribeResult({ args, result, setResult }) {
          if (!isAsyncIterable(result)) return;
          const ctx = args.contextValue;
          const slot = slots.take(tokenKey(ctx.request.headers.get('authorization'), ctx.caller));
          if ('refused' in slot) {
            void result.return?.();
            setResult({ errors: [new GraphQLError(slot.refused, { extensions: { code: 'SUBSCRIPTION_LIMIT' } })] });
            return;
          }
          setResult(releasing(result, slot.release));
        },
      };
    },
  };
}

function isAsyncIterable<T>(
  value: T | AsyncIterableIterator<ExecutionResult>,
): value is AsyncIterableIterator<ExecutionResult> {
  return typeof value === 'object' && value !== null && Symbol.asyncIterator in value;
}

/** `source`, calling `release` once when it is done, fails, or is returned or thrown into. */
function releasing<T>(source: AsyncIterableIterator<T>, release: () => void): AsyncIterableIterator<T> {
  const it = source[Symbol.asyncIterator]();
  return {
    [Symbol.asyncIterator]() {
      return this;
    },
    async next() {
      try {
        const r = await it.next();
        if (r.done) release();
        return r;
      } catch (error) {
        release();
        throw error;
      }
    },
    async return(value?: unknown) {
      release();
      return (await it.return?.(value)) ?? { done: true, value: undefined };
    },
    async throw(error?: unknown) {
      release();
      if (it.throw) return it.throw(error);
      throw error;
    },
  };
}
