import { appendFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { connect, type Sql } from '@postbox/engine';
import { totals, type CheckOptions, type VerifyReport } from '@postbox/engine/verify';
import { createHandlerTables, resetGroupToEarliest, TEST_CONSUMER_MODULE } from './consumer.ts';
import type { FaultBroker } from './fault-broker.ts';
import { digest } from './log-digest.ts';
import { spawnPostbox, spawnScript, waitFor, type RoleProcess } from './processes.ts';
import { settle, verifyTestConsumer } from './verified.ts';

/**
 * The whole chain as real processes, for fault scenarios: a writer (business transactions + outbox), relays
 * (`postbox relay`), consumers (`postbox consume` of the recording handler, with durable retries) and operator
 * commands — all pointed at one test database, one broker and one Redis, every process tracked so that
 * `stopAll()` ends each one even when a test fails. `verify()` and `settle()` run the verifier over its consumer
 * (verified.ts).
 */
export interface PipelineOptions {
  databaseUrl: string;
  /** Kafka's bootstrap servers, unless `broker` names another broker. */
  kafkaBrokers?: string;
  /** Another broker than the Kafka of `kafkaBrokers` (fault-broker.ts). */
  broker?: FaultBroker;
  redisUrl: string;
  topic: string;
  partitions: number;
  /** The consumer's name (inbox, ledger, failures) and, as `postbox.<name>`, its group. */
  consumer: string;
  /** Extra environment for every process. */
  env?: Record<string, string>;
  /** The test's own connection (setup, verifier), e.g. around a fault proxy. @defaultValue databaseUrl */
  adminDatabaseUrl?: string;
}

const WRITER = fileURLToPath(new URL('../faults/fixtures/writer.ts', import.meta.url));

export class Pipeline {
  readonly o: PipelineOptions;
  readonly processes = new Set<RoleProcess>();
  readonly #sql: Sql;

  constructor(o: PipelineOptions) {
    this.o = o;
    this.#sql = connect({ url: o.adminDatabaseUrl ?? o.databaseUrl, max: 3, applicationName: 'postbox-test-pipeline' });
  }

  get sql(): Sql {
    return this.#sql;
  }

  /** The recording handler's tables and the writer's business table. */
  async setup(handlerDelayMs = 0): Promise<void> {
    await createHandlerTables(this.#sql, handlerDelayMs);
    await this.#sql`CREATE TABLE IF NOT EXISTS fault_aggregate (id text PRIMARY KEY, version bigint NOT NULL)`;
  }

  /**
   * A process's environment: the pipeline's servers, then a role's defaults, then the pipeline's `env`, then the
   * call's own. (The pipeline's `env` once came before the role defaults, which silently undid it: the Redis
   * scenario's retry delays and the failpoint scenario's short session timeout never took effect.)
   */
  env(extra: Record<string, string> = {}, defaults: Record<string, string> = {}): Record<string, string> {
    return {
      DATABASE_URL: this.o.databaseUrl,
      ...(this.o.broker ? this.o.broker.env : { KAFKA_BROKERS: this.o.kafkaBrokers! }),
      REDIS_URL: this.o.redisUrl,
      POSTBOX_TOPICS: `${this.o.topic}:${this.o.partitions}`,
      LOG_LEVEL: 'warn',
      ...defaults,
      ...this.o.env,
      ...extra,
    };
  }

  #track(p: RoleProcess): RoleProcess {
    this.processes.add(p);
    void p.exited.then(() => this.processes.delete(p));
    return p;
  }

  /**
   * A writer process; WRITER_* variables tune it (fixtures/writer.ts). Every role takes a network namespace to run
   * in (support/netns.ts), `netns`.
   */
  writer(extra: Record<string, string> = {}, netns?: string): RoleProcess {
    return this.#track(
      spawnScript(
        WRITER,
        [],
        this.env({ WRITER_TOPIC: this.o.topic, WRITER_PREFIX: this.o.consumer, ...extra }),
        netns ? { netns } : {},
      ),
    );
  }

  relay(extra: Record<string, string> = {}, netns?: string): RoleProcess {
    return this.#track(
      spawnPostbox(
        ['relay'],
        this.env(extra, {
          POSTBOX_RELAY_THREADS: '0',
          POSTBOX_RELAY_BATCH_SIZE: '100',
          POSTBOX_RELAY_LEASE_MS: '3000',
          POSTBOX_RELAY_LANE_LEASE_MS: '2000',
          POSTBOX_RELAY_POLL_MS: '250',
        }),
        netns ? { netns } : {},
      ),
    );
  }

  consumer(extra: Record<string, string> = {}, netns?: string): RoleProcess {
    return this.#track(
      spawnPostbox(
        ['consume', TEST_CONSUMER_MODULE, '--progress', '10000'],
        this.env(extra, {
          TEST_TOPIC: this.o.topic,
          TEST_CONSUMER: this.o.consumer,
          TEST_LIMITS: JSON.stringify({ threads: 1, maxBatchEvents: 50 }),
          TEST_RETRY: JSON.stringify({ maxAttempts: 2, baseMs: 200, capMs: 500 }),
          POSTBOX_RETRY_RECONCILE_MS: '2000',
          POSTBOX_KAFKA_SESSION_TIMEOUT_MS: '6000',
          POSTBOX_KAFKA_HEARTBEAT_MS: '1000',
        }),
        netns ? { netns } : {},
      ),
    );
  }

  /** `postbox failures replay` of this consumer's open failures. */
  replay(extra: Record<string, string> = {}, args: string[] = []): RoleProcess {
    return this.#track(
      spawnPostbox(
        [
          'failures',
          'replay',
          '--consumer',
          this.o.consumer,
          '--reason',
          'fault test: downstream fixed',
          '--actor',
          'fault-test',
          '--rate',
          '200',
          ...args,
        ],
        this.env(extra),
      ),
    );
  }

  verify(options: Partial<CheckOptions> = {}): Promise<VerifyReport> {
    const broker = this.o.broker?.verifier() ?? this.o.kafkaBrokers!;
    return verifyTestConsumer(this.#sql, broker, this.o.consumer, [this.o.topic], options);
  }

  /** settle() over this pipeline's consumer. */
  async settle(timeoutMs: number, options: Partial<CheckOptions> = {}): Promise<VerifyReport> {
    try {
      return await settle(() => this.verify({ stuckAfterMs: 60_000, ...options, final: true }), timeoutMs);
    } catch (cause) {
      throw new Error(`${(cause as Error).message}\n${await this.diagnose()}`, { cause });
    }
  }

  /**
   * The whole topic delivered again to a settled pipeline's consumer: `consumer` (its running process) stops, its
   * group goes back to the earliest offsets, a new process reads everything once more. Waits until every inbox
   * row of the consumer counts a duplicate, then settles (the verifier's effect log: nothing applied twice).
   * Returns the inbox rows before and after (equal when the redelivery was all duplicates).
   */
  async redeliverAll(consumer: RoleProcess, timeoutMs = 120_000): Promise<{ before: number; after: number }> {
    const rows = async (duplicatesOnly: boolean) =>
      (
        await this.#sql<{ n: number }[]>`
          SELECT count(*)::int AS n FROM message_inbox
          WHERE consumer_name = ${this.o.consumer} AND (NOT ${duplicatesOnly} OR duplicate_deliveries > 0)`
      )[0]!.n;
    const before = await rows(false);
    await stopGracefully(consumer, 'consumer');
    await resetGroupToEarliest(`postbox.${this.o.consumer}`, this.o.topic);
    this.consumer();
    await waitFor('every event to come again as a duplicate', async () => (await rows(true)) >= before, timeoutMs, 500);
    await this.settle(timeoutMs, { stuckAfterMs: 30_000 });
    return { before, after: await rows(false) };
  }

  /** What explains a pipeline that did not settle: outbox states and errors, and the processes' last output. */
  async diagnose(): Promise<string> {
    const lines: string[] = [];
    try {
      const rows = await this.#sql<{ status: string; error: string | null; n: number }[]>`
        SELECT status, left(last_error, 300) AS error, count(*)::int AS n FROM message_outbox GROUP BY 1, 2 ORDER BY 3 DESC LIMIT 10`;
      for (const r of rows) lines.push(`outbox ${r.status} ×${r.n}: ${r.error ?? '-'}`);
    } catch (cause) {
      lines.push(`outbox not readable: ${(cause as Error).message}`);
    }
    try {
      // A pending row due long ago is the head of a lane nobody runs: who holds the lane, and its batch in flight.
      const heads = await this.#sql<Record<string, unknown>[]>`
        SELECT o.lane, o.seq, o.attempts, round(extract(epoch FROM now() - o.available_at))::int AS due_s_ago,
               l.owner, round(extract(epoch FROM l.lease_until - now()))::int AS lane_lease_s,
               f.owner AS sending_owner, f.sending_to, round(extract(epoch FROM f.sending_until - now()))::int AS sending_s,
               left(o.last_error, 120) AS error
        FROM message_outbox o JOIN relay_lane l USING (lane) LEFT JOIN relay_lane_inflight f USING (lane)
        WHERE o.status = 'pending' AND o.available_at < now() - interval '10 seconds'
        ORDER BY o.available_at LIMIT 10`;
      for (const h of heads) lines.push(`overdue head ${JSON.stringify(h)}`);
    } catch (cause) {
      lines.push(`lanes not readable: ${(cause as Error).message}`);
    }
    const processes = [...this.processes];
    const dead = processes.filter((p) => !alive(p));
    if (dead.length > 0) lines.push(`${dead.length} process(es) ended earlier (killed at failpoints, or stopped)`);
    for (const p of processes.filter(alive))
      lines.push(`--- ${p.child.spawnargs.slice(2).join(' ')} (pid ${p.child.pid}, alive):\n${digest(p.output())}`);
    return lines.join('\n');
  }

  /** SIGTERM every live process, SIGKILL what is still alive after `graceMs`; then the pool. */
  async stopAll(graceMs = 20_000): Promise<void> {
    const live = [...this.processes].filter(alive);
    for (const p of live) p.kill('SIGCONT');
    for (const p of live) p.kill('SIGTERM');
    // Unreferenced: a pending grace timer would hold the test file's process open for its whole length after the
    // last test (20 s per file that used a pipeline, before this).
    await Promise.race([Promise.all(live.map((p) => p.exited)), sleep(graceMs, undefined, { ref: false })]);
    for (const p of [...this.processes].filter(alive)) p.kill('SIGKILL');
    await Promise.all([...this.processes].map((p) => p.exited));
    await this.#sql.end({ timeout: 5 });
  }
}

export function alive(p: RoleProcess): boolean {
  return p.child.exitCode === null && p.child.signalCode === null;
}

/**
 * SIGTERM and wait; the exit code must be 0 (a graceful stop), else the output explains why. With `ready`, waits
 * first until the process printed it (its signal handlers are installed only once its modules loaded).
 */
export async function stopGracefully(p: RoleProcess, what: string, ready?: string): Promise<void> {
  if (!alive(p)) return;
  if (ready) await waitFor(`${what} to be ready`, async () => p.output().includes(ready) || !alive(p), 60_000, 100);
  p.kill('SIGTERM');
  const code = await p.exited;
  if (code !== 0)
    throw new Error(
      `${what} did not stop cleanly (exit ${code}, signal ${p.child.signalCode}):\n${p.output().slice(-3000)}`,
    );
}

export interface ScenarioSummary {
  scenario: string;
  iterations: number;
  report: VerifyReport;
}

/**
 * Prints the scenario's line (and appends it to POSTBOX_FAULT_SUMMARY, which `npm run test:faults` sums up).
 */
export function recordScenario(s: ScenarioSummary): void {
  const t = totals(s.report);
  const line = { scenario: s.scenario, iterations: s.iterations, ...t, ok: s.report.ok };
  console.log(
    `# fault ${s.scenario}: ${s.iterations} iterations, ${t.events} events, ${t.lost} lost, ${t.appliedTwice} applied twice, ${t.reordered} reordered, ${t.duplicatesAbsorbed} duplicates absorbed, ${s.report.log.duplicates} duplicate sends`,
  );
  if (process.env.POSTBOX_FAULT_SUMMARY) appendFileSync(process.env.POSTBOX_FAULT_SUMMARY, `${JSON.stringify(line)}\n`);
}

/** POSTBOX_FAULT_ITERATIONS (default 20): iterations per failpoint and per repeated fault. */
export function faultIterations(fallback = 20): number {
  const n = Number(process.env.POSTBOX_FAULT_ITERATIONS ?? fallback);
  if (!Number.isInteger(n) || n < 1)
    throw new Error(`POSTBOX_FAULT_ITERATIONS must be an integer ≥ 1, got ${process.env.POSTBOX_FAULT_ITERATIONS}`);
  return n;
}

/** A duration from the environment (ms), e.g. POSTBOX_FAULT_OUTAGE_MS; CI runs the short default. */
export function faultDuration(name: string, fallback: number): number {
  const n = Number(process.env[name] ?? fallback);
  if (!Number.isInteger(n) || n < 1) throw new Error(`${name} must be milliseconds ≥ 1, got ${process.env[name]}`);
  return n;
}
