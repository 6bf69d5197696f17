/**
 * SIGINT/SIGTERM → abort the returned signal once, for a graceful stop; a second signal exits at once.
 * Signals are handled only in entry files.
 */
export function shutdownSignal(onForce: () => void = () => process.exit(130)): AbortSignal {
  const controller = new AbortController();
  const handler = () => {
    if (controller.signal.aborted) onForce();
    controller.abort();
  };
  process.on('SIGINT', handler);
  process.on('SIGTERM', handler);
  return controller.signal;
}

export function untilAborted(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve();
    else signal.addEventListener('abort', () => resolve(), { once: true });
  });
}
