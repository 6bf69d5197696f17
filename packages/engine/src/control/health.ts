export interface HealthCheck {
  name: string;
  ok: boolean;
  latencyMs: number;
  /** Why it failed, or null. Never a raw driver error with connection details. */
  error: string | null;
}

export type Probe = () => Promise<unknown>;

/**
 * Readiness: every dependency answers within its timeout. Probes run at once; a slow one is reported as
 * failed at its timeout, not waited for.
 */
export async function checkHealth(
  probes: Record<string, Probe>,
  timeoutMs = 2000,
): Promise<{ ready: boolean; checks: HealthCheck[] }> {
  const checks = await Promise.all(
    Object.entries(probes).map(async ([name, probe]): Promise<HealthCheck> => {
      const started = performance.now();
      let timer: NodeJS.Timeout | undefined;
      try {
        await Promise.race([
          probe(),
          new Promise((_, reject) => {
            timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
          }),
        ]);
        return { name, ok: true, latencyMs: Math.round(performance.now() - started), error: null };
      } catch (cause) {
        return { name, ok: false, latencyMs: Math.round(performance.now() - started), error: summary(cause) };
      } finally {
        clearTimeout(timer);
      }
    }),
  );
  return { ready: checks.every((c) => c.ok), checks };
}

function summary(cause: unknown): string {
  const code = (cause as { code?: unknown })?.code;
  const message = cause instanceof Error ? cause.message : String(cause);
  return `${typeof code === 'string' ? `${code}: ` : ''}${message}`.slice(0, 200);
}
