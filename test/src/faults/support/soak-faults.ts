import { setTimeout as sleep } from 'node:timers/promises';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import type { PrivateServer } from '@postbox/stack';
import type { CutMode, Netns } from '../../support/netns.ts';
import { alive, type Pipeline, stopGracefully } from '../../support/pipeline.ts';
import { restart, type PrivateStack } from '../../support/private-stack.ts';
import type { RoleProcess } from '../../support/processes.ts';
import type { FaultKind, PlannedFault, Role } from './fault-schedule.ts';

/** How long one `postbox failures replay` may run: a few seconds of work, Redis or PostgreSQL away included. */
const REPLAY_DEADLINE_MS = 120_000;

const exec = promisify(execFile);

/**
 * The soak's injectors: each planned fault has a `begin` and an `end` (its heal), both awaited in plan order by
 * faults.mix.test.ts. A role is a slot whose process a kill replaces; `assertAlive` tells a role that died by
 * itself (a finding) from one the soak killed.
 */
export interface RoleSlot {
  role: Role;
  start: () => RoleProcess;
  current: RoleProcess;
  /** Killed by the soak, not restarted yet. */
  down: boolean;
}

export interface SoakSystem {
  netns: Netns;
  stack: PrivateStack;
  p: Pipeline;
  roles: Map<Role, RoleSlot>;
  /** Writer aggregates are `<prefix>-<n>`; a replay fault's target `a<n>` names one. */
  prefix: string;
}

const MODES: Partial<Record<FaultKind, CutMode>> = { partition: 'drop', reset: 'reset', oneway: 'oneway' };

/** The kinds that take away a service the control plane's commands use (they run in the root namespace). */
const SERVICE_KINDS: ReadonlySet<FaultKind> = new Set<FaultKind>([
  'pg-stop',
  'broker-kill',
  'broker-stop',
  'redis-restart',
]);

/** Service faults: how many are on now, how many began, when the last one ended (ms since the epoch, 0: never). */
export interface ServiceFaults {
  active: number;
  begun: number;
  lastEndedAt: number;
}

export class SoakFaults {
  readonly #s: SoakSystem;
  /** Processes of PostgreSQL a pg-stop paused: the same ones get SIGCONT. */
  #pgPaused: number[] = [];
  #extraConsumer: RoleProcess | null = null;
  /** Replay runs and what they printed, for the report. */
  readonly replays: Array<{ code: number | null; output: string }> = [];
  readonly #service: ServiceFaults = { active: 0, begun: 0, lastEndedAt: 0 };

  constructor(system: SoakSystem) {
    this.#s = system;
  }

  #slot(role: string): RoleSlot {
    const slot = this.#s.roles.get(role as Role);
    if (!slot) throw new Error(`no role "${role}" in the soak`);
    return slot;
  }

  #port(service: string): number {
    const { urls } = this.#s.stack;
    if (service === 'pg') return Number(new URL(this.#s.p.o.databaseUrl).port);
    if (service === 'redis') return Number(new URL(urls.REDIS_URL!).port);
    if (service === 'kafka') return Number(urls.KAFKA_BROKERS!.split(':').at(-1));
    throw new Error(`no port for service "${service}"`);
  }

  #server(name: 'kafka' | 'postgres' | 'redis'): PrivateServer {
    const server = this.#s.stack[name];
    if (!server) throw new Error(`the soak's stack has no ${name}`);
    return server;
  }

  /** Faults on the services the control plane's commands use, so far: a command may fail under them only. */
  serviceFaults(): ServiceFaults {
    return { ...this.#service };
  }

  async begin(f: PlannedFault): Promise<void> {
    if (SERVICE_KINDS.has(f.kind)) {
      this.#service.active++;
      this.#service.begun++;
    }
    switch (f.kind) {
      case 'kill': {
        const slot = this.#slot(f.target);
        slot.down = true;
        slot.current.kill('SIGCONT');
        slot.current.kill('SIGKILL');
        await slot.current.exited;
        return;
      }
      case 'stop':
        return this.#slot(f.target).current.kill('SIGSTOP');
      case 'partition':
      case 'reset':
      case 'oneway': {
        const [role, service] = f.target.split(':') as [string, string];
        return this.#s.netns.cut(role, [this.#port(service)], MODES[f.kind]!);
      }
      case 'broker-kill': {
        const kafka = this.#server('kafka');
        await kafka.signal('SIGKILL');
        return kafka.waitForExit();
      }
      case 'broker-stop':
        await this.#server('kafka').signal('SIGSTOP');
        return;
      case 'pg-stop': {
        // The postmaster first (it forks no new backend once stopped), then every backend: SIGSTOP of the
        // postmaster alone leaves the backends serving their connections.
        const pm = await this.#server('postgres').pid();
        if (pm === undefined) throw new Error('pg-stop: PostgreSQL is not running');
        process.kill(pm, 'SIGSTOP');
        this.#pgPaused = [pm, ...(await childrenOf(pm))];
        for (const pid of this.#pgPaused.slice(1)) signalQuietly(pid, 'SIGSTOP');
        return;
      }
      case 'redis-restart': {
        const redis = this.#server('redis');
        await redis.signal('SIGKILL');
        await redis.waitForExit();
        if (f.target === 'wipe') await redis.purge();
        return;
      }
      case 'rebalance':
        this.#extraConsumer = this.#s.p.consumer({}, this.#s.netns.name('c3'));
        return;
      case 'replay':
        await this.#s.p.sql`UPDATE test_handler_control SET fail_aggregates = ${[this.#aggregate(f.target)]}`;
        return;
      default:
        throw new Error(`the single-broker soak cannot inject ${f.kind} (it needs the cluster)`);
    }
  }

  async end(f: PlannedFault): Promise<void> {
    if (SERVICE_KINDS.has(f.kind)) {
      this.#service.active--;
      this.#service.lastEndedAt = Date.now();
    }
    switch (f.kind) {
      case 'kill': {
        const slot = this.#slot(f.target);
        slot.current = slot.start();
        slot.down = false;
        return;
      }
      case 'stop':
        return this.#slot(f.target).current.kill('SIGCONT');
      case 'partition':
      case 'reset':
      case 'oneway': {
        const [role, service] = f.target.split(':') as [string, string];
        return this.#s.netns.uncut(role, [this.#port(service)], MODES[f.kind]!);
      }
      case 'broker-kill':
        return restart(this.#server('kafka'));
      case 'broker-stop':
        await this.#server('kafka').signal('SIGCONT');
        return;
      case 'pg-stop':
        for (const pid of this.#pgPaused) signalQuietly(pid, 'SIGCONT');
        this.#pgPaused = [];
        return;
      case 'redis-restart':
        return restart(this.#server('redis'));
      case 'rebalance': {
        const extra = this.#extraConsumer;
        this.#extraConsumer = null;
        if (extra) await stopGracefully(extra, 'the extra consumer (rebalance)');
        return;
      }
      case 'replay':
        await this.#s.p.sql`UPDATE test_handler_control SET fail_aggregates = '{}'`;
        await this.replayOpen({ servicesMayBeAway: true });
        return;
      default:
        throw new Error(`the single-broker soak cannot heal ${f.kind}`);
    }
  }

  #aggregate(target: string): string {
    return `${this.#s.prefix}-${Number(target.slice(1))}`;
  }

  /** Open failures of the soak's consumer. */
  async openFailures(): Promise<number> {
    const [r] = await this.#s.p.sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM message_failure WHERE consumer_name = ${this.#s.p.o.consumer} AND status = 'open'`;
    return r!.n;
  }

  /**
   * `postbox failures replay` of the open failures, if any. It must end by itself within REPLAY_DEADLINE_MS: a
   * replay that hangs is a finding. A replay that fails is one too — unless `servicesMayBeAway` (another fault may
   * have Redis or PostgreSQL away) and it says so: then what it did not schedule stays open for the next replay.
   */
  async replayOpen(o: { servicesMayBeAway?: boolean } = {}): Promise<number> {
    const open = await this.openFailures();
    if (open === 0) return 0;
    const run = this.#s.p.replay();
    const code = await Promise.race([
      run.exited,
      sleep(REPLAY_DEADLINE_MS, undefined, { ref: false }).then(() => 'hung' as const),
    ]);
    if (code === 'hung') {
      run.kill('SIGKILL');
      throw new Error(`failures replay still ran after ${REPLAY_DEADLINE_MS} ms:\n${run.output().slice(-3000)}`);
    }
    this.replays.push({ code, output: run.output() });
    if (code === 0) return open;
    if (
      o.servicesMayBeAway &&
      /scheduler_unavailable|ECONNREFUSED|CONNECT_TIMEOUT|connection (?:timeout|refused)/i.test(run.output())
    )
      return 0;
    throw new Error(`failures replay exited ${code}:\n${run.output().slice(-3000)}`);
  }

  /**
   * Every fault healed at once (after a failed step, or before the final drain): roles continued and back, cuts
   * removed, servers continued and running, the downstream fixed.
   */
  async healAll(): Promise<void> {
    for (const pid of this.#pgPaused) signalQuietly(pid, 'SIGCONT');
    this.#pgPaused = [];
    for (const server of [this.#s.stack.kafka, this.#s.stack.redis, this.#s.stack.postgres]) {
      if (!server) continue;
      if ((await server.pid()) === undefined) await restart(server);
      else await server.signal('SIGCONT');
    }
    for (const slot of this.#s.roles.values()) {
      await this.#s.netns.heal(slot.role);
      if (slot.down || !alive(slot.current)) {
        slot.current = slot.start();
        slot.down = false;
      } else slot.current.kill('SIGCONT');
    }
    await this.#s.netns.heal('c3');
    if (this.#extraConsumer) await stopGracefully(this.#extraConsumer, 'the extra consumer (rebalance)');
    this.#extraConsumer = null;
    await this.#s.p.sql`UPDATE test_handler_control SET fail_aggregates = '{}'`;
  }

  /** Continues whatever is paused (before the stack stops: a stopped backend would outlive its postmaster). */
  async releasePaused(): Promise<void> {
    for (const pid of this.#pgPaused) signalQuietly(pid, 'SIGCONT');
    this.#pgPaused = [];
    await this.#s.stack.kafka?.signal('SIGCONT').catch(() => 0);
    for (const slot of this.#s.roles.values()) if (alive(slot.current)) slot.current.kill('SIGCONT');
  }

  /** Throws when a role the soak did not kill has ended: that is a finding, not a fault. */
  assertAlive(when: string): void {
    for (const slot of this.#s.roles.values())
      if (!slot.down && !alive(slot.current))
        throw new Error(
          `role ${slot.role} died by itself ${when} (exit ${slot.current.child.exitCode}, signal ${slot.current.child.signalCode}):\n${slot.current.output().slice(-3000)}`,
        );
  }
}

async function childrenOf(pid: number): Promise<number[]> {
  const { stdout } = await exec('ps', ['-o', 'pid=', '--ppid', String(pid)], { encoding: 'utf8' }).catch(
    (cause: { code?: number; stdout?: string }) => {
      // ps exits 1 when there is no child.
      if (cause.code === 1) return { stdout: cause.stdout ?? '' };
      throw new Error(`listing the children of ${pid}`, { cause });
    },
  );
  return stdout
    .split('\n')
    .map((l) => Number(l.trim()))
    .filter((n) => n > 0);
}

function signalQuietly(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // ended meanwhile: nothing to pause or continue
  }
}
