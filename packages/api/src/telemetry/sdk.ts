import { diag, DiagLogLevel, type DiagLogger } from '@opentelemetry/api';
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus';
import type { IMetricReader } from '@opentelemetry/sdk-metrics';
import { startNodeSdk } from '@opentelemetry/sdk-node';
import type { SpanProcessor } from '@opentelemetry/sdk-trace';
import { ConfigError, silentLogger, type Logger } from '@postbox/engine';
import { otelRequest } from '@postbox/engine/runtime';
import { defaultServiceName, SEND_LINK_LIMIT } from '@postbox/workers';
import { settledResource } from './resource.ts';

/**
 * The OpenTelemetry SDK of one Postbox process (main thread; worker threads start their own, see
 * @postbox/workers thread-telemetry.ts). Off unless the environment asks:
 *
 * - traces: the standard variables (OTEL_TRACES_EXPORTER, or an OTLP endpoint; exporter, protocol, headers,
 *   sampler, batch processor, resource: all OTEL_* as the SDK reads them). See engine telemetry/otel-env.ts.
 * - metrics: a Prometheus endpoint on POSTBOX_METRICS_PORT (POSTBOX_METRICS_HOST, default all interfaces), or
 *   the standard OTEL_METRICS_EXPORTER readers when that port is not set.
 * - OTEL_SDK_DISABLED=true: nothing at all.
 *
 * With neither asked for, no SDK is started and the engine's API calls stay no-ops.
 */
export interface Telemetry extends AsyncDisposable {
  readonly tracing: boolean;
  /** The Prometheus endpoint's port, null when there is none. */
  readonly metricsPort: number | null;
  /** Flushes what is buffered and stops exporting; idempotent, bounded by `timeoutMs`. */
  shutdown(timeoutMs?: number): Promise<void>;
}

export interface TelemetryOptions {
  /** @defaultValue process.env */
  env?: NodeJS.ProcessEnv;
  /** SDK diagnostics and the start/stop lines go here. @defaultValue silent */
  log?: Logger;
  /** Replaces the span processors OTEL_* would configure (tests: an in-memory exporter). */
  spanProcessors?: SpanProcessor[];
  /** Replaces the metric readers (tests). */
  metricReaders?: IMetricReader[];
}

const OFF: Telemetry = {
  tracing: false,
  metricsPort: null,
  shutdown: async () => {},
  [Symbol.asyncDispose]: async () => {},
};

/**
 * Starts the SDK for a role (relay, consumer, api, …: the `postbox.role` resource attribute and the default
 * service.name `postbox-<role>`). Call it first in an entry file, before any telemetry is made:
 * `await using telemetry = await startTelemetry('relay', { log });` flushes when the command returns.
 * Throws ConfigError for a bad POSTBOX_METRICS_PORT or a port that cannot be bound.
 */
export async function startTelemetry(role: string, options: TelemetryOptions = {}): Promise<Telemetry> {
  const env = options.env ?? process.env;
  const log = options.log ?? silentLogger;
  const request = otelRequest(env);
  if (request.disabled) return OFF;
  const port = metricsPort(env);
  const tracing = options.spanProcessors ? options.spanProcessors.length > 0 : request.traces;

  let prometheus: { exporter: PrometheusExporter; started: Promise<void> } | null = null;
  let metricReaders: IMetricReader[] | undefined = options.metricReaders;
  if (!metricReaders && port !== null) {
    prometheus = startPrometheus(port, env.POSTBOX_METRICS_HOST);
    metricReaders = [prometheus.exporter];
    if (request.metricsFromEnv) {
      log.warn(
        { role },
        'OTEL_METRICS_EXPORTER is ignored while POSTBOX_METRICS_PORT is set; for both, use OTEL_METRICS_EXPORTER=otlp,prometheus with OTEL_EXPORTER_PROMETHEUS_PORT',
      );
    }
  }
  if (!metricReaders && !request.metricsFromEnv) metricReaders = [];
  if (!tracing && metricReaders?.length === 0) return OFF;

  const sdk = startNodeSdk({
    logLevel: 'none', // replaced below by the process's own logger
    // undefined → the SDK builds them from OTEL_TRACES_EXPORTER & co; [] → no TracerProvider at all.
    spanProcessors: options.spanProcessors ?? (request.traces ? undefined : []),
    ...(metricReaders ? { metricReaders } : {}),
    logRecordProcessors: [], // Postbox logs through pino (stdout); no OTel logs pipeline
    baseResource: await settledResource(env),
    resourceDetectors: [],
    resourceAttributes: { 'postbox.role': role, ...defaultServiceName(role, env) },
    ...(env.OTEL_SPAN_LINK_COUNT_LIMIT ? {} : { spanLimits: { linkCountLimit: SEND_LINK_LIMIT } }),
  });
  diag.setLogger(diagToLog(log), { logLevel: diagLevel(env.OTEL_LOG_LEVEL), suppressOverrideMessage: true });
  try {
    await prometheus?.started;
  } catch (cause) {
    await sdk.shutdown().catch(() => {});
    throw new ConfigError(
      `POSTBOX_METRICS_PORT ${port}: the metrics endpoint could not listen (${(cause as Error).message}); choose a free port or unset it`,
      { cause },
    );
  }
  log.info({ role, tracing, metricsPort: port }, 'telemetry started');

  let stopping: Promise<void> | null = null;
  const shutdown = (timeoutMs = 5000): Promise<void> => {
    stopping ??= (async () => {
      let timer: NodeJS.Timeout | undefined;
      // A collector that is down must not hold the process's exit for ever: what is not out in time is lost.
      const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), timeoutMs)));
      try {
        const result = await Promise.race([sdk.shutdown().then(() => 'done' as const), late]);
        if (result === 'late') log.warn({ role, timeoutMs }, 'telemetry shutdown timed out; unexported spans are lost');
      } catch (cause) {
        log.warn({ role, err: (cause as Error).message }, 'telemetry shutdown failed; unexported spans are lost');
      } finally {
        clearTimeout(timer);
      }
    })();
    return stopping;
  };
  return { tracing, metricsPort: port, shutdown, [Symbol.asyncDispose]: () => shutdown() };
}

function metricsPort(env: NodeJS.ProcessEnv): number | null {
  const raw = env.POSTBOX_METRICS_PORT?.trim();
  if (!raw) return null;
  const port = Number(raw);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new ConfigError(`POSTBOX_METRICS_PORT must be a port number (0–65535; 0 picks a free one), got "${raw}"`);
  }
  return port;
}

function startPrometheus(
  port: number,
  host: string | undefined,
): { exporter: PrometheusExporter; started: Promise<void> } {
  let settle!: (error: Error | void) => void;
  const started = new Promise<void>((resolve, reject) => (settle = (error) => (error ? reject(error) : resolve())));
  // withoutScopeInfo: the otel_scope_* labels on every series say only "@postbox/engine".
  const exporter = new PrometheusExporter({ port, ...(host ? { host } : {}), withoutScopeInfo: true }, (error) =>
    settle(error),
  );
  return { exporter, started };
}

/** The SDK's own diagnostics (export failures, dropped spans) as log lines of the process's logger. */
function diagToLog(log: Logger): DiagLogger {
  const line =
    (level: 'info' | 'warn' | 'error') =>
    (message: string, ...args: unknown[]) =>
      log[level](
        {
          component: 'opentelemetry',
          ...(args.length > 0
            ? { detail: args.map((a) => (a instanceof Error ? a.message : String(a))).join(' ') }
            : {}),
        },
        message,
      );
  return { error: line('error'), warn: line('warn'), info: line('info'), debug: () => {}, verbose: () => {} };
}

function diagLevel(value: string | undefined): DiagLogLevel {
  switch ((value ?? '').trim().toUpperCase()) {
    case 'NONE':
      return DiagLogLevel.NONE;
    case 'ERROR':
      return DiagLogLevel.ERROR;
    case 'INFO':
      return DiagLogLevel.INFO;
    case 'DEBUG':
      return DiagLogLevel.DEBUG;
    case 'VERBOSE':
    case 'ALL':
      return DiagLogLevel.ALL;
    default:
      return DiagLogLevel.WARN;
  }
}
