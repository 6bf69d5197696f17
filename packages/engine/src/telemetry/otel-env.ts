/**
 * What the standard OTEL_* variables ask for, decided in one place for the main thread (api telemetry/sdk.ts)
 * and for every worker thread (workers thread-telemetry.ts), which must agree. Pure: entry files pass their
 * environment in.
 *
 * Tracing is off unless asked for: by OTEL_TRACES_EXPORTER (anything but `none`), or by an OTLP endpoint
 * (OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, which implies the otlp exporter). The SDK's
 * own default (otlp to localhost:4318 when nothing is set) would make an unconfigured process retry exports to
 * a collector that is not there. OTEL_SDK_DISABLED=true turns everything off, the metrics endpoint included.
 */
export interface OtelRequest {
  disabled: boolean;
  traces: boolean;
  /** OTEL_METRICS_EXPORTER names a reader (otlp, prometheus, console): the SDK builds it from the environment. */
  metricsFromEnv: boolean;
}

type Env = Record<string, string | undefined>;

export function otelRequest(env: Env): OtelRequest {
  const disabled = (env.OTEL_SDK_DISABLED ?? '').trim().toLowerCase() === 'true';
  if (disabled) return { disabled, traces: false, metricsFromEnv: false };
  const exporters = list(env.OTEL_TRACES_EXPORTER);
  const endpoint = Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim() || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim());
  const traces = exporters.length > 0 ? !exporters.includes('none') : endpoint;
  const metricExporters = list(env.OTEL_METRICS_EXPORTER);
  return { disabled, traces, metricsFromEnv: metricExporters.length > 0 && !metricExporters.includes('none') };
}

function list(value: string | undefined): string[] {
  return (value ?? '')
    .split(',')
    .map((s) => s.trim().toLowerCase())
    .filter(Boolean);
}
