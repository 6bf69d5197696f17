import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const CLI = fileURLToPath(new URL('../../../packages/api/src/bin/postbox.ts', import.meta.url));

export interface RoleProcess {
  child: ChildProcess;
  /** Everything it printed (stdout + stderr). */
  output(): string;
  exited: Promise<number | null>;
  kill(signal: NodeJS.Signals): void;
}

export interface SpawnOptions {
  /**
   * A network namespace to run in (support/netns.ts). `ip netns exec` execs the command, so the child's pid is
   * the role's own: signals reach it as they would outside.
   */
  netns?: string;
}

/** Runs `postbox <args>` as a real process on the same Node, with the given environment added. */
export function spawnPostbox(args: string[], env: Record<string, string>, options: SpawnOptions = {}): RoleProcess {
  return spawnScript(CLI, args, env, options);
}

/** Runs a script (a .ts file) as a real process on the same Node, with the given environment added. */
export function spawnScript(
  file: string,
  args: string[],
  env: Record<string, string>,
  options: SpawnOptions = {},
): RoleProcess {
  const node = [
    process.execPath,
    '--conditions=@postbox/source',
    '--disable-warning=TimeoutNegativeWarning',
    file,
    ...args,
  ];
  const [command, ...argv] = options.netns ? ['ip', 'netns', 'exec', options.netns, ...node] : node;
  const child = spawn(command!, argv, {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, output: () => out, exited, kill: (s) => child.kill(s) };
}

export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined | false>,
  timeoutMs = 60_000,
  everyMs = 200,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** The final counters a `postbox consume` process printed on exit (its "consumer-stats" line). */
export function consumerStats(p: RoleProcess): { applied: number; drained: number } {
  const line = p
    .output()
    .split('\n')
    .find((l) => l.includes('"consumer-stats"'));
  if (!line) throw new Error(`no consumer-stats line in the output:\n${p.output().slice(-2000)}`);
  return JSON.parse(line)['consumer-stats'];
}

/** True once a `postbox consume` process (LOG_LEVEL=info) has logged an assignment holding a partition. */
export function holdsPartitions(p: RoleProcess): boolean {
  return p
    .output()
    .split('\n')
    .some((line) => {
      if (!line.includes('consumer assignment')) return false;
      const { assigned } = JSON.parse(line) as { assigned?: string[] };
      return (assigned?.length ?? 0) > 0;
    });
}
