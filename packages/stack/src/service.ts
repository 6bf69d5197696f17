import fs from 'node:fs/promises';
import { StackError } from './errors.ts';
import { canConnect, formatAddress, waitUntil, type HostPort } from './ports.ts';

/**
 * One server of the local stack, as `up`, `down` and `status` see it. Each server file (postgres.ts, redis.ts,
 * kafka.ts, nats.ts) builds one; the lifecycle rules that are the same for all of them live here, once.
 */
export interface LocalService {
  name: 'postgres' | 'redis' | 'kafka' | 'nats' | 'rabbitmq';
  /** The address clients use. */
  address: HostPort;
  /** Further ports the server binds (Kafka's controller), checked for squatters before a start. */
  otherPorts: HostPort[];
  /** The env var that points Postbox at an existing server instead of this one. */
  envVar: 'DATABASE_URL' | 'REDIS_URL' | 'KAFKA_BROKERS' | 'NATS_URL' | 'RABBITMQ_URL';
  /** Our value for `envVar`. */
  url: string;
  dataDir: string;
  logFile: string;
  pidFile: string;
  /**
   * False for PostgreSQL: its postmaster.pid also guards against starting a second postmaster over orphaned
   * backends still attached to shared memory, so only PostgreSQL itself may decide that it is stale.
   */
  mayRemovePidFile: boolean;
  /** The pid of the server we started, when it is alive. */
  ownedPid(): Promise<number | undefined>;
  /** Throws a prerequisite_missing StackError naming what to install. Called before anything is started. */
  checkPrerequisites(): Promise<void>;
  /** Prepares files and launches the server; returns once its pid file names it (not when it answers). */
  start(): Promise<void>;
  /** Resolves once the server does real work (a query, a PING, a metadata request); throws while it can't. */
  ready(): Promise<void>;
  stop(pid: number): Promise<void>;
  /** Deletes the server's data and logs; never a download cache. Called only when it is stopped. */
  purge(): Promise<void>;
}

export interface UpResult {
  state: 'started' | 'already running';
  pid: number | undefined;
}

export async function ensureUp(service: LocalService, timeoutMs: number): Promise<UpResult> {
  const wait = {
    what: `${service.name} on ${formatAddress(service.address)}`,
    hint: `read ${service.logFile}`,
    timeoutMs,
  };
  const running = await service.ownedPid();
  if (running !== undefined) {
    // Ours and alive; it may still be starting (another `up` just launched it), so wait rather than assume.
    await waitUntil(() => service.ready(), wait);
    return { state: 'already running', pid: await service.ownedPid() };
  }
  for (const address of [service.address, ...service.otherPorts]) {
    if (await canConnect(address)) throw portTaken(service, address);
  }
  if (service.mayRemovePidFile) await fs.rm(service.pidFile, { force: true });
  await service.start();
  await waitUntil(() => service.ready(), {
    ...wait,
    gaveUp: async () => ((await service.ownedPid()) === undefined ? 'the server exited while starting' : undefined),
  });
  return { state: 'started', pid: await service.ownedPid() };
}

/** Stops the server if we started it; returns its pid, or undefined when nothing of ours was running. */
export async function ensureDown(service: LocalService): Promise<number | undefined> {
  const pid = await service.ownedPid();
  if (pid !== undefined) await service.stop(pid);
  if (service.mayRemovePidFile) await fs.rm(service.pidFile, { force: true });
  return pid;
}

export async function localStatus(service: LocalService): Promise<{ running: boolean; pid?: number }> {
  const pid = await service.ownedPid();
  if (pid === undefined) return { running: false };
  return { running: await canConnect(service.address), pid };
}

function portTaken(service: LocalService, address: HostPort): StackError {
  return new StackError(
    'port_taken',
    `port ${address.port} (${service.name}) is in use by a process Postbox did not start ` +
      `(no live ${service.name} in ${service.pidFile}). ` +
      `Free it (find the owner with: ss -ltnp 'sport = :${address.port}') ` +
      `or point Postbox at an existing server: export ${service.envVar}=${service.url}`,
  );
}
