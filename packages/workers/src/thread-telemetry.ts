import { randomUUID } from 'node:crypto';
import { BroadcastChannel, threadId } from 'node:worker_threads';
import { otelRequest } from '@postbox/engine/runtime';

/**
 * Tracing inside piscina threads. A worker thread has its own copy of the OpenTelemetry API globals, so for the
 * SDK it is a separate process (the SDK keeps per-thread state): each thread that traces starts its own SDK from the same OTEL_*
 * variables as the main thread and exports its spans itself. The spans are made where their data is — the relay
 * cycle's rows, the consume task's records — and the context a span needs from the main thread travels in the
 * task (a due retry's span, ConsumeTask.traceparent). Metrics are not made here: the main thread records them
 * from task results, so one Prometheus endpoint sees them all.
 *
 * piscina ends a thread with terminate(), which would drop the spans still in its batch processor; so before a
 * pool closes, the main thread asks each tracing thread on a BroadcastChannel of the pool's own to shut its SDK
 * down (flushing it) and waits for the answers.
 */
export interface ThreadTelemetryOptions {
  /** The pool's BroadcastChannel name. */
  channel: string;
  /** resource attribute postbox.role, and the default service.name (postbox-<role>). */
  role: string;
}

type Message = { type: 'ready' | 'flushed'; thread: number } | { type: 'flush' };

const STARTED = Symbol.for('postbox.thread-telemetry');

/** Worker side: starts the thread's SDK when the environment asks for traces. Idempotent per thread. */
export async function startThreadTelemetry(
  options: ThreadTelemetryOptions | undefined,
  env: NodeJS.ProcessEnv,
): Promise<void> {
  const g = globalThis as { [STARTED]?: boolean };
  if (!options || g[STARTED] || !otelRequest(env).traces) return;
  g[STARTED] = true;
  // Loaded only when tracing is on: the SDK's module graph is large.
  const { startNodeSdk } = await import('@opentelemetry/sdk-node');
  const sdk = startNodeSdk({
    metricReaders: [],
    logRecordProcessors: [],
    logLevel: env.OTEL_LOG_LEVEL ?? 'warn',
    resourceAttributes: { 'postbox.role': options.role, ...defaultServiceName(options.role, env) },
    ...(env.OTEL_SPAN_LINK_COUNT_LIMIT ? {} : { spanLimits: { linkCountLimit: SEND_LINK_LIMIT } }),
  });
  const channel = new BroadcastChannel(options.channel);
  channel.unref();
  channel.onmessage = (event: unknown) => {
    const message = (event as { data?: Message }).data;
    if (message?.type !== 'flush') return;
    sdk.shutdown().then(
      () => channel.postMessage({ type: 'flushed', thread: threadId } satisfies Message),
      () => channel.postMessage({ type: 'flushed', thread: threadId } satisfies Message),
    );
  };
  channel.postMessage({ type: 'ready', thread: threadId } satisfies Message);
}

/**
 * A send span links every message of its batch (up to the relay's batchSize, at most 10,000); the SDK's default
 * of 128 links would drop most of them. OTEL_SPAN_LINK_COUNT_LIMIT, when set, wins.
 */
export const SEND_LINK_LIMIT = 10_000;

/**
 * service.name: OTEL_SERVICE_NAME (it wins over OTEL_RESOURCE_ATTRIBUTES, as the specification says), else the
 * service OTEL_RESOURCE_ATTRIBUTES names, else postbox-<role>.
 */
export function defaultServiceName(role: string, env: NodeJS.ProcessEnv): Record<string, string> {
  const named = env.OTEL_SERVICE_NAME?.trim();
  if (named) return { 'service.name': named };
  if (/(^|,)\s*service\.name\s*=/.test(env.OTEL_RESOURCE_ATTRIBUTES ?? '')) return {};
  return { 'service.name': `postbox-${role}` };
}

/** Main side: one per pool; its options go to the threads in workerData. */
export class ThreadTelemetry {
  readonly options: ThreadTelemetryOptions;
  readonly #channel: BroadcastChannel;
  readonly #ready = new Set<number>();
  #waiting: ((thread: number) => void) | null = null;
  #closed = false;

  constructor(role: string) {
    this.options = { channel: `postbox.telemetry.${randomUUID()}`, role };
    this.#channel = new BroadcastChannel(this.options.channel);
    this.#channel.unref();
    this.#channel.onmessage = (event: unknown) => {
      const message = (event as { data?: Message }).data;
      if (message?.type === 'ready') this.#ready.add(message.thread);
      else if (message?.type === 'flushed') this.#waiting?.(message.thread);
    };
  }

  /** Asks every tracing thread to flush and end its SDK; waits for all, or `timeoutMs`. Idempotent. */
  async flush(timeoutMs = 5000): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const pending = new Set(this.#ready);
    if (pending.size > 0) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, timeoutMs);
        this.#waiting = (thread) => {
          pending.delete(thread);
          if (pending.size === 0) {
            clearTimeout(timer);
            resolve();
          }
        };
        this.#channel.postMessage({ type: 'flush' } satisfies Message);
      });
    }
    this.#channel.close();
  }
}
