import { spawn, type SpawnOptions } from 'node:child_process';
import fs from 'node:fs/promises';
import { openSync, closeSync, readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { StackError } from './errors.ts';

/** The first line of a pid file as a number, or undefined when the file is missing or not a pid file. */
export async function readPidFile(file: string): Promise<number | undefined> {
  let text: string;
  try {
    text = await fs.readFile(file, 'utf8');
  } catch {
    return undefined;
  }
  const pid = Number.parseInt(text.split('\n', 1)[0] ?? '', 10);
  return Number.isInteger(pid) && pid > 0 ? pid : undefined;
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    // EPERM: it exists but belongs to another user (our postgres runs as the `postgres` OS user).
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
  return !isZombie(pid);
}

/**
 * A dead process nobody has reaped still answers kill(pid, 0). That happens when PID 1 is not an init that
 * reaps orphans (as in some containers and VMs), so "alive" must also mean "not a zombie".
 */
function isZombie(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The state follows the parenthesised command name, which may itself contain spaces or parentheses.
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) === 'Z';
  } catch {
    return false;
  }
}

/**
 * The pid from `pidFile` when that process is alive and its command line contains `marker`. The marker guards
 * against a stale pid file whose number the kernel has since given to an unrelated process.
 */
export async function ownedPid(pidFile: string, marker: string): Promise<number | undefined> {
  const pid = await readPidFile(pidFile);
  if (pid === undefined || !isAlive(pid)) return undefined;
  try {
    const cmdline = (await fs.readFile(`/proc/${pid}/cmdline`, 'utf8')).replaceAll('\0', ' ');
    return cmdline.includes(marker) ? pid : undefined;
  } catch {
    // No /proc (not Linux): trust the live pid.
    return pid;
  }
}

export interface RunOptions {
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  uid?: number;
  gid?: number;
  timeoutMs?: number;
  /** Start in its own session, so a daemon it forks is not part of our process group. */
  detached?: boolean;
}

/** Runs a command to completion; on failure the error message carries its output, which is what explains it. */
export function run(
  command: string,
  args: string[],
  options: RunOptions = {},
): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const spawnOptions: SpawnOptions = {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: options.env ?? process.env,
      cwd: options.cwd,
      detached: options.detached ?? false,
    };
    if (options.uid !== undefined) spawnOptions.uid = options.uid;
    if (options.gid !== undefined) spawnOptions.gid = options.gid;
    const child = spawn(command, args, spawnOptions);
    let stdout = '';
    let stderr = '';
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    const timer =
      options.timeoutMs === undefined ? undefined : setTimeout(() => child.kill('SIGKILL'), options.timeoutMs).unref();
    const describe = `${command} ${args.join(' ')}`;
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(new StackError('command_failed', `could not run ${describe}: ${err.message}`, { cause: err }));
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) {
        resolve({ stdout, stderr });
        return;
      }
      const output = (stderr.trim() || stdout.trim()).split('\n').slice(-20).join('\n');
      const how = signal ? `was killed by ${signal}` : `exited with code ${code}`;
      reject(new StackError('command_failed', `${describe} ${how}${output ? `:\n${output}` : ''}`));
    });
  });
}

/**
 * Starts a long-running server that must outlive this process: its own session (no SIGHUP/SIGINT from our
 * terminal), output straight into `logFile` (no pipe that would break when we exit), and not awaited.
 */
export function spawnDetached(command: string, args: string[], logFile: string, options: RunOptions = {}): number {
  const fd = openSync(logFile, 'a');
  try {
    const child = spawn(command, args, {
      detached: true,
      stdio: ['ignore', fd, fd],
      env: options.env ?? process.env,
      cwd: options.cwd,
    });
    if (child.pid === undefined) {
      throw new StackError('start_failed', `could not start ${command}; read ${logFile}`);
    }
    // A spawn failure (ENOENT) arrives later as an event; without a listener it would crash the process.
    child.once('error', () => {});
    child.unref();
    return child.pid;
  } finally {
    closeSync(fd);
  }
}

/**
 * SIGTERM, then SIGKILL if it is still alive after `graceMs`. Resolves with how it ended. Only ever called with
 * a pid that `ownedPid` vouched for.
 */
export async function terminate(pid: number, graceMs: number): Promise<'exited' | 'killed'> {
  if (!signal(pid, 'SIGTERM')) return 'exited';
  if (await waitForExit(pid, graceMs)) return 'exited';
  signal(pid, 'SIGKILL');
  await waitForExit(pid, 5000);
  return 'killed';
}

export async function waitForExit(pid: number, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (isAlive(pid)) {
    if (Date.now() >= deadline) return false;
    await sleep(100);
  }
  return true;
}

function signal(pid: number, name: NodeJS.Signals): boolean {
  try {
    process.kill(pid, name);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ESRCH') return false;
    throw new StackError('stop_failed', `could not send ${name} to pid ${pid}`, { cause: err });
  }
}

export async function fileExists(file: string): Promise<boolean> {
  try {
    await fs.access(file);
    return true;
  } catch {
    return false;
  }
}
