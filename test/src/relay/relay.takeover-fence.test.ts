import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { BrokerError, connect, type Sql } from '@postbox/engine';
import { KafkaPublisher } from '@postbox/engine/kafka';
import {
  inlineExecutor,
  Relay,
  resolveRelayOptions,
  type OutboundMessage,
  type Publisher,
  type PublishOutcome,
} from '@postbox/engine/runtime';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { writeEvents } from '../support/events.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { restart, startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import { waitFor } from '../support/processes.ts';
import { allPublished } from '../support/relay.ts';
import { stack as shared } from '../support/stack.ts';

// ADR 0010/0011: the claim's record commits asynchronously, so a PostgreSQL crash right after a claim can lose
// it — and with it the batch lease that makes a relay taking the lane over wait for that batch. The takeover
// fence replaces it: a lane taken over waits until a batch lease after the earlier of its previous lease's end
// and the server's last start or crash recovery. Reproduced for real, for both kinds of server crash (the
// postmaster stopped at once and started again; a backend killed, which makes the running postmaster recover
// from the WAL): relay A claims and stalls in its publish (its publisher never returns), the server goes down at
// once before anything flushes the claim (the WAL writer wakes every 10 s here, nothing else commits), A stays
// cut off (its connections go through a proxy that refuses from then on), its lane leases lapse, and relay B
// takes the lanes. B must publish nothing before the fence: A may still be sending those rows.
const LANE_LEASE_MS = 2000;
const BATCH_LEASE_MS = 10_000;

let pg: PrivateStack;
let db: TestDatabase | undefined;
const pools: Sql[] = [];
const relays: Relay[] = [];
const stalledPublishers: Array<{ release(): void }> = [];

before(async () => {
  pg = await startPrivateStack({ postgres: { proxy: true, settings: ['wal_writer_delay=10s', 'autovacuum=off'] } });
});

after(async () => {
  // A stalled publish holds its relay's stop: let it end first (a failed assertion leaves it stalled).
  for (const stalled of stalledPublishers) stalled.release();
  for (const relay of relays) await relay.stop().catch(() => {});
  for (const pool of pools) await pool.end({ timeout: 1 }).catch(() => {});
  await db?.drop().catch(() => {});
  await pg?.stop();
});

/** A publisher whose publish never comes back until `release()`: a relay stalled in its send. */
function stalledPublisher(): Publisher & { called: Promise<void>; release(): void } {
  let called!: () => void;
  let release!: () => void;
  const calledP = new Promise<void>((resolve) => (called = resolve));
  const released = new Promise<void>((resolve) => (release = resolve));
  return {
    called: calledP,
    release,
    async publish(messages: OutboundMessage[]): Promise<PublishOutcome[]> {
      called();
      await released;
      const error = new BrokerError('publish_timeout', 'unknown', 'stalled publisher released');
      return messages.map(() => ({ ok: false, error }));
    },
    async close() {
      release();
    },
  };
}

/** Kafka, recording when each publish call began (the relay's clock, the server's too: one machine). */
function recordingPublisher(): Publisher & { calls: number[] } {
  const kafka = new KafkaPublisher({ brokers: shared.KAFKA_BROKERS.split(','), clientId: 'postbox-test-fence' });
  const calls: number[] = [];
  return {
    calls,
    publish(messages, options) {
      calls.push(Date.now());
      return kafka.publish(messages, options);
    },
    close: () => kafka.close(),
  };
}

/**
 * How the server goes down right after A's claim (called synchronously from A's publish), and what the test
 * waits for until it answers again. Returns: a time at or before the server's new start (or end of recovery).
 */
interface Crash {
  name: string;
  prepare(db: TestDatabase): Promise<() => void>;
  recover(db: TestDatabase): Promise<number>;
}

const postmasterStop: Crash = {
  name: 'the postmaster stopped at once (SIGQUIT) and started again',
  async prepare() {
    const postmaster = (await pg.postgres!.pid())!;
    return () => process.kill(postmaster, 'SIGQUIT');
  },
  async recover() {
    await pg.postgres!.waitForExit();
    await sleep(LANE_LEASE_MS + 1000);
    const restartedAfter = Date.now();
    await restart(pg.postgres!);
    return restartedAfter;
  },
};

// The postmaster survives this one: it ends every backend and recovers from the WAL on its own, so
// pg_postmaster_start_time() stays the same; the fence must still see the recovery.
let killedAt = 0;
const backendKill: Crash = {
  name: 'a backend killed (SIGKILL): crash recovery without a postmaster restart',
  async prepare(db) {
    const [row] = await db.sql<{ pid: number; uptime_ms: number }[]>`
      SELECT pg_backend_pid() AS pid,
             (extract(epoch FROM now() - pg_postmaster_start_time()) * 1000)::int AS uptime_ms`;
    // The postmaster's start must be older than a batch lease, or it alone would fence the lanes.
    await sleep(Math.max(0, BATCH_LEASE_MS + 1000 - row!.uptime_ms));
    return () => {
      killedAt = Date.now();
      process.kill(row!.pid, 'SIGKILL');
    };
  },
  async recover(db) {
    await sleep(LANE_LEASE_MS + 1000);
    await waitFor('PostgreSQL recovered', () => db.sql`SELECT 1`.then(() => true).catch(() => false), 60_000, 500);
    return killedAt;
  },
};

for (const crash of [postmasterStop, backendKill]) {
  test(`${crash.name}, a claim lost: a relay taking the lanes over publishes nothing before the takeover fence`, {
    timeout: 180_000,
  }, async () => {
    await fencedTakeover(crash);
  });
}

async function fencedTakeover(crash: Crash): Promise<void> {
  await db?.drop();
  const fresh = await freshDatabase('pbf', pg.direct.DATABASE_URL!);
  db = fresh;
  const topic = uniqueTopic('fence');
  await createTopic(topic, 3);
  pg.proxies.postgres!.setMode('forward');
  const proxyPort = pg.proxies.postgres!.port;
  const directPort = new URL(pg.direct.DATABASE_URL!).port;
  const viaProxy = fresh.url.replace(`:${directPort}/`, `:${proxyPort}/`);
  const total = await writeEvents(fresh.sql, topic, 48, 3, 72);
  const options = resolveRelayOptions({ laneLeaseMs: LANE_LEASE_MS, leaseMs: BATCH_LEASE_MS, pollMs: 200 });

  // Relay A: every connection through the proxy; its publish stalls.
  const aSql = connect({ url: viaProxy, max: 4, applicationName: 'postbox-test-fence-a' });
  pools.push(aSql);
  const stalled = stalledPublisher();
  stalledPublishers.push(stalled);
  const a = new Relay({ sql: aSql, executor: inlineExecutor({ sql: aSql, publisher: stalled, options }), options });
  relays.push(a);
  const goDown = await crash.prepare(fresh);
  await a.start();
  await stalled.called;
  // The claim has committed (asynchronously) and A is inside its publish: the server goes down at once, and A
  // never reaches it again.
  goDown();
  pg.proxies.postgres!.setMode('refuse');
  pg.proxies.postgres!.cut();
  const serverStartedAfter = await crash.recover(fresh);

  // The precondition: the crash lost A's claims (no batch lease in any lane), while A's lane leases survived.
  const inflight = await fresh.sql<{ n: number }[]>`
    SELECT count(*)::int AS n FROM relay_lane_inflight WHERE sending_until IS NOT NULL`;
  assert.equal(inflight[0]!.n, 0, 'the crash lost the claim record (nothing flushed it before the stop)');
  const leases = await fresh.sql<{ owner: string; lease_until: Date }[]>`
    SELECT owner, lease_until FROM relay_lane WHERE owner IS NOT NULL`;
  assert.ok(leases.length > 0 && leases.every((l) => l.owner === a.owner), `A held the lanes: ${leases.length}`);
  const published = await fresh.sql<{ n: number }[]>`
    SELECT count(*)::int AS n FROM message_outbox WHERE status = 'published'`;
  assert.equal(published[0]!.n, 0, 'nothing was published before the crash');
  // A's claim came before its lease's end and before the server went down: its batch may run until then + lease.
  const lastLease = Math.min(...leases.map((l) => l.lease_until.getTime()));
  const fence = Math.min(lastLease, serverStartedAfter) + BATCH_LEASE_MS;

  // B takes every lane at its start; C, started once B holds them, gets half of them from B, which gives them back
  // as surplus while they still wait out the fence: the fence must go with them.
  const b = await startRecordingRelay(fresh.url, 'b', options);
  assert.ok(b.relay.stats().lanes.length > 0, 'B took lanes over at its start');
  const c = await startRecordingRelay(fresh.url, 'c', options);
  await waitFor('C holds lanes given back by B', async () => c.relay.stats().lanes.length > 0, 10_000, 100);
  const handedOver = Date.now();
  assert.ok(
    handedOver < fence - 2000,
    `C got lanes ${fence - handedOver} ms before the fence: the test shows something`,
  );

  await allPublished(fresh.sql, topic, total, 90_000);
  for (const [name, relay] of [
    ['B', b],
    ['C', c],
  ] as const) {
    assert.ok(relay.calls.length > 0, `${name} published some of the events`);
    const first = Math.min(...relay.calls);
    assert.ok(
      first >= fence,
      `${name}'s first publish came ${fence - first} ms before the fence (${new Date(fence).toISOString()}): ` +
        `A may still have been sending those rows`,
    );
  }
  stalled.release();
  await b.relay.stop();
  await c.relay.stop();
  await a.stop();
}

/** A relay on its own pool that publishes to Kafka and records when each publish began. */
async function startRecordingRelay(
  url: string,
  name: string,
  options: ReturnType<typeof resolveRelayOptions>,
): Promise<{ relay: Relay; calls: number[] }> {
  const sql = connect({ url, max: 4, applicationName: `postbox-test-fence-${name}` });
  pools.push(sql);
  const publisher = recordingPublisher();
  const relay = new Relay({ sql, executor: inlineExecutor({ sql, publisher, options }), options });
  relays.push(relay);
  await relay.start();
  return { relay, calls: publisher.calls };
}
