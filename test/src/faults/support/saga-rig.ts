import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import type { Sql } from '@postbox/engine';
import { KafkaOffsets, KafkaTopicReader } from '@postbox/engine/kafka';
import { formatReport, verify, type VerifyReport } from '@postbox/engine/verify';
import { alive } from '../../support/pipeline.ts';
import { createPrivateTopic, type PrivateStack } from '../../support/private-stack.ts';
import { spawnPostbox, spawnScript, waitFor, type RoleProcess } from '../../support/processes.ts';
import { settle } from '../../support/verified.ts';

/**
 * The order-fulfilment saga (test/src/saga/fixtures) between real processes, for fault scenarios that need its
 * roles placed one by one (a network namespace each): the saga service (starts sagas, runs a timer runner), the
 * participants and reply consumers (`postbox consume` of fixtures/saga/saga-consumer.ts), a relay. The saga's
 * topics come from POSTBOX_TEST_SAGA_PREFIX, which must be set before order-saga.ts is first imported.
 */
export const SAGA_ROLES = ['inventory', 'payments', 'shipping', 'replies'] as const;
export type SagaRole = (typeof SAGA_ROLES)[number];

const SERVICE = fileURLToPath(new URL('../fixtures/saga/saga-service.ts', import.meta.url));
const CONSUMER = fileURLToPath(new URL('../fixtures/saga/saga-consumer.ts', import.meta.url));

export interface SagaRigOptions {
  sql: Sql;
  databaseUrl: string;
  stack: PrivateStack;
  prefix: string;
  /** Environment for every process, after the rig's own. */
  env?: Record<string, string>;
  /** The saga service's script. @defaultValue fixtures/saga/saga-service.ts */
  serviceScript?: string;
}

export interface SagaOutcome {
  sagas: number;
  statuses: Record<string, number>;
  /** History lines a timer wrote (timeouts, questions, deadlines). */
  timerLines: number;
  lostReplies: number;
}

export class SagaRig {
  readonly o: SagaRigOptions;
  readonly processes = new Set<RoleProcess>();
  #topics: Record<SagaRole, string> | null = null;
  readonly #service: string;

  constructor(o: SagaRigOptions) {
    this.o = o;
    this.#service = o.serviceScript ?? SERVICE;
  }

  /** The saga's topics (3 partitions each) and the fixtures' tables. Once per database. */
  async setup(): Promise<void> {
    const { topics } = await import('../../saga/fixtures/order-saga.ts');
    this.#topics = topics;
    for (const topic of Object.values(topics)) await createPrivateTopic(this.o.stack, topic, 3);
    await this.o
      .sql`CREATE TABLE test_saga_effect (participant text NOT NULL, order_id text NOT NULL, action text NOT NULL)`;
    await this.o.sql`CREATE TABLE test_saga_lost_reply (event_id uuid PRIMARY KEY)`;
  }

  env(extra: Record<string, string> = {}): Record<string, string> {
    return {
      DATABASE_URL: this.o.databaseUrl,
      KAFKA_BROKERS: this.o.stack.urls.KAFKA_BROKERS!,
      REDIS_URL: this.o.stack.urls.REDIS_URL!,
      POSTBOX_TEST_SAGA_PREFIX: this.o.prefix,
      POSTBOX_TOPICS: Object.values(this.#topics!)
        .map((t) => `${t}:3`)
        .join(','),
      POSTBOX_KAFKA_SESSION_TIMEOUT_MS: '3000',
      POSTBOX_KAFKA_HEARTBEAT_MS: '500',
      LOG_LEVEL: 'warn',
      ...this.o.env,
      ...extra,
    };
  }

  #track(p: RoleProcess): RoleProcess {
    this.processes.add(p);
    void p.exited.then(() => this.processes.delete(p));
    return p;
  }

  /** Starts sagas at SAGA_RATE a second (none with SAGA_ORDERS=0) and fires timers. */
  service(extra: Record<string, string> = {}, netns?: string): RoleProcess {
    return this.#track(
      spawnScript(
        this.#service,
        [],
        this.env({ SAGA_RATE: '2', SAGA_ORDERS: '1000000', ...extra }),
        netns ? { netns } : {},
      ),
    );
  }

  consumer(role: SagaRole, extra: Record<string, string> = {}, netns?: string): RoleProcess {
    return this.#track(
      spawnPostbox(['consume', CONSUMER], this.env({ SAGA_ROLE: role, ...extra }), netns ? { netns } : {}),
    );
  }

  relay(netns?: string): RoleProcess {
    const env = { POSTBOX_RELAY_THREADS: '0', POSTBOX_RELAY_POLL_MS: '100', POSTBOX_RELAY_LEASE_MS: '3000' };
    return this.#track(spawnPostbox(['relay'], this.env(env), netns ? { netns } : {}));
  }

  /**
   * Ends the load: every saga service stops (SIGTERM), one that starts nothing fires the timers of the sagas in
   * flight until each has ended. Returns the count of sagas by status.
   */
  async drain(timeoutMs = 240_000): Promise<Record<string, number>> {
    const services = [...this.processes].filter((p) => p.child.spawnargs.includes(this.#service) && alive(p));
    for (const p of services) p.kill('SIGTERM');
    await Promise.all(services.map((p) => p.exited));
    this.service({ SAGA_ORDERS: '0' });
    return waitFor(
      'every saga ended',
      async () => {
        const rows = await this.o.sql<{ status: string; n: number }[]>`
          SELECT status, count(*)::int AS n FROM saga_instance GROUP BY status`;
        const by = Object.fromEntries(rows.map((r) => [r.status, r.n]));
        return (by.running ?? 0) + (by.resolving ?? 0) + (by.compensating ?? 0) === 0 ? by : undefined;
      },
      timeoutMs,
      1000,
    );
  }

  /** The verifier's final check over the four saga consumers and the sagas, once everything settled. */
  async settle(timeoutMs = 120_000): Promise<VerifyReport> {
    const once = () => this.#verify();
    const report = await settle(once, timeoutMs).catch(async (e: unknown) => {
      throw new Error(`${(e as Error).message}\n${formatReport(await once())}`, { cause: e });
    });
    assert.deepEqual(
      report.violations.map((v) => v.message),
      [],
    );
    return report;
  }

  async #verify(): Promise<VerifyReport> {
    const kafka = { brokers: this.o.stack.urls.KAFKA_BROKERS!.split(','), clientId: 'postbox-test-saga-verify' };
    const reader = new KafkaTopicReader({ ...kafka, timeoutMs: 60_000 });
    const offsets = new KafkaOffsets(kafka);
    try {
      return await verify(
        { sql: this.o.sql, reader, offsets },
        SAGA_ROLES.map((role) => ({
          name: `${this.o.prefix}-${role}`,
          groupId: `postbox.${this.o.prefix}-${role}`,
          topics: [this.#topics![role]],
        })),
        { final: true, stuckAfterMs: 60_000 },
      );
    } finally {
      await offsets.close();
      await reader.close();
    }
  }

  /**
   * The saga promises as final state: every saga completed or compensated, no participant effect twice, each
   * order's effects what its end implies, and no saga version written by two transitions (a timer fired twice
   * from one state would write its version twice: the version fence forbids it).
   */
  async assertOutcome(): Promise<SagaOutcome> {
    const sql = this.o.sql;
    const effects = await sql<{ order_id: string; participant: string; action: string; n: number }[]>`
      SELECT order_id, participant, action, count(*)::int AS n FROM test_saga_effect GROUP BY 1, 2, 3`;
    assert.deepEqual(
      effects.filter((e) => e.n > 1),
      [],
      'no participant effect applied twice',
    );
    const byOrder = new Map<string, Set<string>>();
    for (const e of effects)
      byOrder.set(e.order_id, (byOrder.get(e.order_id) ?? new Set()).add(`${e.participant}:${e.action}`));
    const sagas = await sql<{ business_key: string; status: string }[]>`
      SELECT business_key, status FROM saga_instance`;
    const wrong: string[] = [];
    for (const s of sagas) {
      const done = byOrder.get(s.business_key) ?? new Set<string>();
      const ok =
        s.status === 'completed'
          ? ['inventory:reserve', 'payments:charge', 'shipping:ship'].every((x) => done.has(x)) &&
            !done.has('inventory:release') &&
            !done.has('payments:refund')
          : s.status === 'compensated' &&
            !done.has('shipping:ship') &&
            done.has('inventory:reserve') === done.has('inventory:release') &&
            done.has('payments:charge') === done.has('payments:refund');
      if (!ok) wrong.push(`${s.business_key} ${s.status}: ${[...done].sort().join(', ')}`);
    }
    assert.deepEqual(wrong, [], 'every saga completed with all three effects, or compensated with each undone');
    const twice = await sql<{ saga_id: string; version: string; causes: string }[]>`
      SELECT saga_id, version::text, string_agg(cause, ' | ') AS causes FROM saga_history
      GROUP BY 1, 2 HAVING count(*) > 1 LIMIT 10`;
    assert.deepEqual([...twice], [], 'no saga version written by two transitions (no timer transition twice)');
    const [counts] = await sql<{ timer: number; lost: number }[]>`
      SELECT (SELECT count(*)::int FROM saga_history WHERE cause ~ '^(timed out|deadline)') AS timer,
             (SELECT count(*)::int FROM test_saga_lost_reply) AS lost`;
    const statuses: Record<string, number> = {};
    for (const s of sagas) statuses[s.status] = (statuses[s.status] ?? 0) + 1;
    return { sagas: sagas.length, statuses, timerLines: counts!.timer, lostReplies: counts!.lost };
  }

  /** SIGTERM every live process, SIGKILL what outlives `graceMs`. */
  async stopAll(graceMs = 15_000): Promise<void> {
    const live = [...this.processes].filter(alive);
    for (const p of live) p.kill('SIGTERM');
    const timer = setTimeout(() => live.filter(alive).forEach((p) => p.kill('SIGKILL')), graceMs);
    await Promise.all(live.map((p) => p.exited));
    clearTimeout(timer);
  }
}

/**
 * The backend of a connection from `address` waiting at the gate (cutWhenWaiting) — a statement of its
 * transaction received by the server and held there — with its transaction id; undefined while there is none.
 */
export async function backendAtGate(
  sql: Sql,
  gate: Gate,
  address: string,
): Promise<{ pid: number; xid: string } | undefined> {
  const [row] = await sql<{ pid: number; xid: string | null }[]>`
    SELECT a.pid, a.backend_xid::text AS xid FROM pg_stat_activity a
    JOIN pg_locks l ON l.pid = a.pid AND NOT l.granted AND l.locktype = 'advisory' AND l.objid = ${gate.key}
    WHERE a.client_addr = ${address}::inet LIMIT 1`;
  return row ? { pid: row.pid, xid: row.xid ?? '' } : undefined;
}

export interface Gate {
  name: string;
  key: number;
}

/**
 * A gate on the inserts into `table` that match `when` (SQL over NEW): a trigger of the test's taking the shared
 * advisory lock `key`, free while nobody holds it exclusively. Writers of other rows never wait at it.
 */
export async function installGate(sql: Sql, gate: Gate, table: string, when: string): Promise<Gate> {
  await sql.unsafe(`
    CREATE OR REPLACE FUNCTION test_gate_${gate.name}() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF ${when} THEN PERFORM pg_advisory_xact_lock_shared(${gate.key}); END IF;
      RETURN NEW;
    END $$`);
  await sql.unsafe(`CREATE OR REPLACE TRIGGER test_gate_${gate.name} BEFORE INSERT ON ${table}
    FOR EACH ROW EXECUTE FUNCTION test_gate_${gate.name}()`);
  return gate;
}

/**
 * Closes the gate (installGate) until a connection from `address` waits at one — a writer stopped before its
 * gated insert, mid-transaction, each earlier statement done at the server — then runs `cut` and opens it: the
 * insert is done at the server, what the writer sends after it is cut off. Returns that backend (its transaction
 * id: the zombie's).
 */
export async function cutWhenWaiting(
  sql: Sql,
  o: { gate: Gate; address: string; what: string; timeoutMs: number; cut: () => Promise<void> },
): Promise<{ pid: number; xid: string }> {
  let backend: { pid: number; xid: string } | undefined;
  await sql.begin(async (tx) => {
    await tx`SELECT pg_advisory_xact_lock(${o.gate.key})`;
    backend = await waitFor(o.what, () => backendAtGate(sql, o.gate, o.address), o.timeoutMs, 20).catch(
      async (cause: unknown) => {
        throw new Error(`${(cause as Error).message} (from ${o.address}); connections:\n${await activity(sql)}`, {
          cause,
        });
      },
    );
    await o.cut();
  });
  return backend!;
}

/** What every client connection is doing (for a failure message). */
export async function activity(sql: Sql): Promise<string> {
  const rows = await sql<Record<string, unknown>[]>`
    SELECT a.pid, host(a.client_addr) AS addr, a.state, a.wait_event_type AS wait, left(a.query, 80) AS query,
           (SELECT string_agg(l.locktype || ':' || coalesce(l.relation::regclass::text, l.objid::text), ',')
            FROM pg_locks l WHERE l.pid = a.pid AND NOT l.granted) AS waiting_for
    FROM pg_stat_activity a WHERE a.client_addr IS NOT NULL ORDER BY addr`;
  return rows.map((r) => JSON.stringify(r)).join('\n');
}

/** Waits until the transaction `xid` has ended (the zombie's, once its link is back); its fate. */
export async function transactionEnd(sql: Sql, xid: string, timeoutMs = 120_000): Promise<string> {
  return waitFor(
    `transaction ${xid} to end`,
    async () => {
      // A fresh cluster's epoch is 0: the 32-bit id is the full one.
      const [r] = await sql<{ status: string }[]>`SELECT pg_xact_status(${xid}::text::xid8) AS status`;
      return r!.status === 'in progress' ? undefined : r!.status;
    },
    timeoutMs,
    250,
  );
}
