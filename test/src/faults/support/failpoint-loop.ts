import { setTimeout as sleep } from 'node:timers/promises';
import type { RoleProcess } from '../../support/processes.ts';

export interface FailpointLoop {
  /** The failpoint armed in each run, as `<name>@<n>` with n drawn from 1…maxPass. */
  name: string;
  maxPass: number;
  iterations: number;
  spawn: (env: Record<string, string>) => RoleProcess;
  /** A run that has not reached its failpoint by then is killed and not counted. @defaultValue 60000 */
  runTimeoutMs?: number;
  /** The whole loop must be done by then (epoch ms). */
  deadline: number;
}

export interface FailpointLoopResult {
  name: string;
  kills: number;
  /** Runs that never reached their failpoint in time (killed, not counted). */
  misses: number;
  meanRunMs: number;
}

/**
 * Kill -9 at a crash boundary, again and again: each run is a fresh process armed to SIGKILL itself on the n-th
 * pass of the failpoint (n random), restarted as soon as it died, until `iterations` runs died there. A run that
 * exits any other way is a failure of the test (the output says why).
 */
export async function failpointLoop(l: FailpointLoop): Promise<FailpointLoopResult> {
  const result: FailpointLoopResult = { name: l.name, kills: 0, misses: 0, meanRunMs: 0 };
  let total = 0;
  while (result.kills < l.iterations) {
    if (Date.now() > l.deadline)
      throw new Error(
        `${l.name}: only ${result.kills} of ${l.iterations} kills before the deadline (${result.misses} runs missed the failpoint)`,
      );
    const pass = 1 + Math.floor(Math.random() * l.maxPass);
    const started = Date.now();
    const p = l.spawn({ POSTBOX_FAILPOINT: `${l.name}@${pass}` });
    const ended = await Promise.race([
      p.exited.then(() => true),
      sleep(l.runTimeoutMs ?? 60_000, undefined, { ref: false }).then(() => false),
    ]);
    if (!ended) {
      p.kill('SIGKILL');
      await p.exited;
      result.misses++;
      continue;
    }
    if (p.child.signalCode !== 'SIGKILL') {
      throw new Error(
        `${l.name}@${pass}: the process ended (exit ${p.child.exitCode}, signal ${p.child.signalCode}) instead of dying at its failpoint:\n${p.output().slice(-3000)}`,
      );
    }
    result.kills++;
    total += Date.now() - started;
  }
  result.meanRunMs = Math.round(total / Math.max(1, result.kills));
  return result;
}
