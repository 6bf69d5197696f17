import { join } from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { brokerEnv, type BenchBroker } from '../brokers.ts';
import { stack, trackGroup } from '../support.ts';

const POSTBOX = fileURLToPath(new URL('../../../packages/api/src/bin/postbox.ts', import.meta.url));
const CONSUMER_MODULE = fileURLToPath(new URL('./consumer-module.ts', import.meta.url));

/** A spawned `postbox relay` or `postbox consume` process; stop() sends SIGTERM (the roles' graceful stop). */
export interface RoleProcess {
  role: string;
  pid: number;
  /** The latest `consumer-progress` line of a consumer (its committed count), 0 before the first. */
  committed(): number;
  stop(): Promise<void>;
}

const live = new Set<RoleProcess>();

export function spawnRelay(o: {
  databaseUrl: string;
  /** The topic (or topics) the relay waits for at start. */
  topic: string | string[];
  partitions: number;
  threads: number;
  batch: number;
  label: string;
  /** @defaultValue 'kafka' */
  broker?: BenchBroker;
}): RoleProcess {
  return spawnRole(o.label, ['relay', '--threads', String(o.threads)], {
    ...brokerEnv(o.broker ?? 'kafka'),
    DATABASE_URL: o.databaseUrl,
    POSTBOX_TOPICS: [o.topic]
      .flat()
      .map((t) => `${t}:${o.partitions}`)
      .join(','),
    POSTBOX_RELAY_BATCH_SIZE: String(o.batch),
  });
}

export function spawnConsumer(o: {
  databaseUrl: string;
  topic: string;
  consumer: string;
  threads: number;
  label: string;
  /** @defaultValue 'kafka' */
  broker?: BenchBroker;
  /** The topic's partitions: RabbitMQ's consumer declares its queues with them. @defaultValue 1 (Kafka and NATS read theirs) */
  partitions?: number;
}): RoleProcess {
  trackGroup(`postbox.${o.consumer}`);
  return spawnRole(o.label, ['consume', '--progress', '250', '--threads', String(o.threads), CONSUMER_MODULE], {
    ...brokerEnv(o.broker ?? 'kafka'),
    DATABASE_URL: o.databaseUrl,
    POSTBOX_TOPICS: `${o.topic}:${o.partitions ?? 1}`,
    BENCH_CONSUMER: o.consumer,
    BENCH_TOPIC: o.topic,
  });
}

let cpuProfDir: string | null = null;

/** From now on, spawned roles write V8 CPU profiles (one per thread, at exit) under `dir/<role label>`. */
export function profileRolesInto(dir: string | null): void {
  cpuProfDir = dir;
}

function spawnRole(role: string, args: string[], env: Record<string, string>): RoleProcess {
  const profile = cpuProfDir
    ? ['--cpu-prof', `--cpu-prof-dir=${join(cpuProfDir, role.replace(/[^A-Za-z0-9_.-]+/g, '-'))}`]
    : [];
  const child = spawn(
    process.execPath,
    ['--conditions=@postbox/source', '--disable-warning=TimeoutNegativeWarning', ...profile, POSTBOX, ...args],
    {
      env: {
        ...process.env,
        REDIS_URL: stack.REDIS_URL,
        KAFKA_BROKERS: stack.KAFKA_BROKERS,
        LOG_LEVEL: 'warn',
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  if (child.pid === undefined)
    throw new Error(`bench: could not start ${role} (${process.execPath} ${POSTBOX} ${args.join(' ')})`);
  let count = 0;
  let tail = '';
  const stderr: string[] = [];
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    const lines = (tail + chunk).split('\n');
    tail = lines.pop() ?? '';
    for (const line of lines) {
      if (!line.startsWith('{"consumer-')) continue;
      try {
        const s = Object.values(JSON.parse(line) as Record<string, { applied: number; drained: number }>)[0]!;
        count = s.applied + s.drained;
      } catch {
        // a partial or foreign line: the next progress line corrects the count
      }
    }
  });
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
    stderr.push(chunk);
    if (stderr.length > 50) stderr.shift();
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  let stopping: Promise<void> | null = null;
  const proc: RoleProcess = {
    role,
    pid: child.pid,
    committed: () => count,
    stop() {
      stopping ??= stopChild(child, exited, role, stderr).finally(() => live.delete(proc));
      return stopping;
    },
  };
  live.add(proc);
  void exited.then((code) => {
    if (!stopping && code !== 0)
      process.stderr.write(
        `\nbench: ${role} (pid ${child.pid}) exited with ${code}: ${stderr.join('').slice(-2000)}\n`,
      );
  });
  return proc;
}

async function stopChild(
  child: ChildProcess,
  exited: Promise<number | null>,
  role: string,
  stderr: string[],
): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
  const code = await exited;
  clearTimeout(timer);
  if (code !== 0 && code !== null)
    throw new Error(
      `bench: ${role} (pid ${child.pid}) stopped with exit code ${code}: ${stderr.join('').slice(-2000)}`,
    );
}

/** Stops every role process still running (the end of a run, or after a failure). */
export async function stopAllRoles(): Promise<void> {
  await Promise.allSettled([...live].map((p) => p.stop()));
}

/** Resident memory of a process in MiB (VmRSS of /proc/<pid>/status: every thread, workers included). */
export async function rssMiB(pid: number): Promise<number | null> {
  try {
    const status = await readFile(`/proc/${pid}/status`, 'utf8');
    const kb = /VmRSS:\s+(\d+) kB/.exec(status)?.[1];
    return kb === undefined ? null : Number(kb) / 1024;
  } catch {
    return null; // the process has exited
  }
}
