import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { startTestApi, type TestApi } from '../support/api.ts';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { uniqueTopic } from '../support/kafka.ts';
import { alive, faultDuration, Pipeline, recordScenario, stopGracefully } from '../support/pipeline.ts';
import { createPrivateTopic, restart, startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import { waitFor, type RoleProcess } from '../support/processes.ts';

// PostgreSQL, Kafka and Redis all down at once for POSTBOX_FAULT_OUTAGE_MS (10 s in `npm test`, 60 s in
// `npm run test:faults`; a soak runs minutes)
// while a writer, a relay, a consumer and the control plane keep running: readiness turns red and names each
// dependency, the processes back off instead of spinning (CPU measured from /proc over the outage), nobody dies,
// and once the services are back readiness turns green and everything committed is applied once, in order.
const OUTAGE_MS = faultDuration('POSTBOX_FAULT_OUTAGE_MS', 10_000);
// A process retrying with backoff uses a few percent of a core; a tight loop uses all of it.
const MAX_CPU_SHARE = 0.25;

let s: PrivateStack;
let db: TestDatabase;
let api: TestApi | null = null;
let pipeline: Pipeline | null = null;
const topic = uniqueTopic('outage');
const consumer = `ou${topic.slice(-6)}`;

before(async () => {
  s = await startPrivateStack({ postgres: {}, kafka: {}, redis: true });
  db = await freshDatabase('pbo', s.urls.DATABASE_URL!);
  await createPrivateTopic(s, topic, 3);
});

after(async () => {
  await api?.close().catch(() => {});
  await pipeline?.stopAll();
  await db?.drop().catch(() => {});
  await s?.stop();
});

/** CPU seconds (user + system) a process used so far, from /proc/<pid>/stat. */
function cpuSeconds(p: RoleProcess): number {
  const fields = readFileSync(`/proc/${p.child.pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

async function health(a: TestApi): Promise<{ ready: boolean; down: string[] }> {
  const r = await a.gql<{ health: { ready: boolean; checks: Array<{ name: string; ok: boolean }> } }>(
    '{ health { ready checks { name ok } } }',
  );
  assert.ok(r.data, `health answered: ${JSON.stringify(r.errors)}`);
  return {
    ready: r.data.health.ready,
    down: r.data.health.checks
      .filter((c) => !c.ok)
      .map((c) => c.name)
      .sort(),
  };
}

test(`PostgreSQL, Kafka and Redis down for ${OUTAGE_MS / 1000} s: readiness red, no tight loops, nobody dies, everything resumes`, {
  timeout: OUTAGE_MS + 480_000,
}, async () => {
  const p = (pipeline = new Pipeline({
    databaseUrl: db.url,
    kafkaBrokers: s.urls.KAFKA_BROKERS!,
    redisUrl: s.urls.REDIS_URL!,
    topic,
    partitions: 3,
    consumer,
  }));
  await p.setup();
  api = await startTestApi(db.url, {
    redisUrl: s.urls.REDIS_URL!,
    kafkaBrokers: s.urls.KAFKA_BROKERS!,
    topics: `${topic}:3`,
  });
  const roles = [
    p.writer({ WRITER_RATE: '30', WRITER_AGGREGATES: '60', WRITER_FLAKY: '0.05' }),
    p.relay({ POSTBOX_RELAY_THREADS: '1' }),
    p.consumer(),
  ];
  await waitFor(
    'events applied before the outage',
    async () => {
      const [r] = await p.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM test_applied`;
      return r!.n >= 100;
    },
    90_000,
    500,
  );
  assert.deepEqual(await health(api), { ready: true, down: [] });

  await Promise.all([s.kafka!.signal('SIGKILL'), s.redis!.signal('SIGKILL'), s.postgres!.signal('SIGQUIT')]);
  await Promise.all([s.kafka!.waitForExit(), s.redis!.waitForExit(), s.postgres!.waitForExit()]);
  // Measured after the first seconds, when every client has noticed and settled into its backoff.
  await sleep(Math.min(10_000, OUTAGE_MS / 4));
  const down = await health(api);
  assert.equal(down.ready, false);
  assert.deepEqual(down.down, ['kafka', 'postgres', 'redis'], 'readiness names every dependency that is down');
  const cpuBefore = roles.map(cpuSeconds);
  const measuredFrom = Date.now();
  await sleep(OUTAGE_MS - Math.min(10_000, OUTAGE_MS / 4));
  const elapsed = (Date.now() - measuredFrom) / 1000;
  const shares = roles.map((r, i) => (cpuSeconds(r) - cpuBefore[i]!) / elapsed);
  for (const r of roles)
    assert.ok(alive(r), `${r.child.spawnargs.slice(2).join(' ')} died during the outage:\n${r.output().slice(-3000)}`);
  console.log(
    `# outage: CPU share during ${Math.round(elapsed)} s down — writer ${pct(shares[0]!)}, relay ${pct(shares[1]!)}, consumer ${pct(shares[2]!)}`,
  );
  shares.forEach((share, i) =>
    assert.ok(
      share < MAX_CPU_SHARE,
      `${['writer', 'relay', 'consumer'][i]} used ${pct(share)} of a core while everything was down: a tight loop`,
    ),
  );
  assert.equal((await health(api)).ready, false);

  await Promise.all([restart(s.postgres!), restart(s.redis!), restart(s.kafka!)]);
  await waitFor('readiness green again', async () => (await health(api!)).ready, 120_000, 1000);
  await sleep(5000);
  await stopGracefully(roles[0]!, 'writer', 'writer started');
  // Retries that fell due while everything was down are overdue by the outage itself; stuck means still overdue
  // a minute after the services came back.
  const report = await p.settle(240_000, { stuckAfterMs: OUTAGE_MS + 60_000 });
  const c = report.consumers[0]!;
  assert.equal(c.lost.count, 0);
  assert.equal(c.appliedTwice!.count, 0);
  assert.equal(c.outOfOrder.count, 0);
  for (const r of roles.slice(1))
    assert.ok(alive(r), `${r.child.spawnargs.slice(2).join(' ')} died after the outage:\n${r.output().slice(-3000)}`);
  recordScenario({ scenario: 'outage.all-services', iterations: 1, report });
});

function pct(share: number): string {
  return `${(share * 100).toFixed(1)}%`;
}
