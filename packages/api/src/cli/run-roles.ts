import type { Logger } from '@postbox/engine';
import { RoleSet, StartInterrupted } from './role-set.ts';
import { untilAborted } from './signals.ts';

/**
 * Runs a command's roles as one unit: `start` starts them through the RoleSet; then they run until the stop
 * signal, and stop last started first. A failed start stops what had started and rethrows (the CLI prints its
 * one line and exits 1); a stop signal during start-up stops what had started and exits 0.
 */
export async function runRoles(
  signal: AbortSignal,
  log: Logger,
  start: (roles: RoleSet) => Promise<void>,
): Promise<number> {
  const roles = new RoleSet(signal);
  const stopAll = () =>
    roles.stop((name, cause) => log.error({ role: name, err: String(cause) }, 'role did not stop cleanly'));
  try {
    await start(roles);
  } catch (error) {
    await stopAll();
    if (error instanceof StartInterrupted) return 0;
    throw error;
  }
  await untilAborted(signal);
  await stopAll();
  return 0;
}
