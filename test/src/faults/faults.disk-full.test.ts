import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { alive, Pipeline, recordScenario, stopGracefully } from '../support/pipeline.ts';
import { restart, startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import { stack as shared } from '../support/stack.ts';

// The database's disk fills up under load: a private PostgreSQL whose data directory is a size-limited tmpfs
// (tmpfs ignores fsync, so this proves disk-full behaviour only, not durability), filled by a
// ballast file. Writes must fail with a clear error and leave no partial state (a business row and its outbox
// row commit together or not at all); once the ballast is gone everything recovers — the server restarted if
// it had shut itself down, as an operator would — and the verifier finds nothing lost.
const TMPFS_MB = 192;

let pg: PrivateStack;
let db: TestDatabase;
let pipeline: Pipeline | null = null;
let ballast: string;

before(async () => {
  pg = await startPrivateStack({
    postgres: { tmpfsMb: TMPFS_MB, settings: ['min_wal_size=32MB', 'max_wal_size=64MB'] },
  });
  db = await freshDatabase('pbd', pg.urls.DATABASE_URL!);
  ballast = path.join(pg.postgres!.dataDir, '..', 'ballast');
});

after(async () => {
  await fs.rm(ballast, { force: true });
  await pipeline?.stopAll();
  await db?.drop().catch(() => {});
  await pg?.stop();
});

/** Writes zeros until the file system is full; returns the bytes written. */
async function fill(file: string): Promise<number> {
  const handle = await fs.open(file, 'w');
  const chunk = Buffer.alloc(1024 * 1024);
  let written = 0;
  try {
    for (;;) {
      try {
        const { bytesWritten } = await handle.write(chunk);
        written += bytesWritten;
        if (bytesWritten < chunk.length) break;
      } catch (cause) {
        if ((cause as NodeJS.ErrnoException).code === 'ENOSPC') break;
        throw cause;
      }
    }
  } finally {
    await handle.close().catch(() => {});
  }
  return written;
}

test('disk full on the database: clear errors, nothing half-written, everything recovers once space returns', {
  timeout: 480_000,
}, async () => {
  const topic = uniqueTopic('diskfull');
  await createTopic(topic, 3);
  const p = (pipeline = new Pipeline({
    databaseUrl: db.url,
    kafkaBrokers: shared.KAFKA_BROKERS,
    redisUrl: shared.REDIS_URL,
    topic,
    partitions: 3,
    consumer: `df${topic.slice(-6)}`,
  }));
  await p.setup();
  const writer = p.writer({ WRITER_RATE: '40', WRITER_AGGREGATES: '60', WRITER_PAD: '2000' });
  const relay = p.relay();
  const consumer = p.consumer();
  await sleep(8000);
  const filled = await fill(ballast);
  const [before] = await p.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM message_outbox`.catch(() => [{ n: -1 }]);
  await sleep(15_000);
  const [during] = await p.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM message_outbox`.catch(() => [{ n: -1 }]);
  // The server log sits on the full disk too; what the clients were told is the evidence.
  const log = await fs.readFile(pg.postgres!.logFile, 'utf8').catch(() => '');
  assert.match(
    `${writer.output()}\n${relay.output()}\n${log}`,
    /No space left on device|pg_53100/,
    `the full disk was reported: ${writer.output().slice(-800)}`,
  );
  assert.match(
    writer.output(),
    /writer: transaction failed \((pg_53100|network_|pg_57p0|pg_08)/,
    `the writer got a clear error: ${writer.output().slice(-800)}`,
  );
  const told = /writer: transaction failed \(([^)]{0,160})/.exec(writer.output())?.[1];
  console.log(
    `# disk full: ballast ${Math.round(filled / 1048576)} MiB; outbox rows ${before!.n} when full, ${during!.n} after 15 s (-1: server down); the writer was told: ${told}`,
  );

  await fs.rm(ballast);
  const wasDown = (await pg.postgres!.pid()) === undefined;
  if (wasDown) await restart(pg.postgres!);
  await sleep(10_000);
  for (const r of [writer, relay, consumer])
    assert.ok(alive(r), `${r.child.spawnargs.slice(2).join(' ')} died:\n${r.output().slice(-3000)}`);
  await stopGracefully(writer, 'writer', 'writer started');
  // Nothing half-written: every committed business version has its outbox event, and no event lacks its version.
  const [partial] = await p.sql<{ n: number }[]>`
    SELECT count(*)::int AS n FROM fault_aggregate f
    WHERE f.version <> (SELECT count(*) FROM message_outbox o WHERE o.aggregate_id = f.id)
       OR f.version <> (SELECT max(aggregate_version) FROM message_outbox o WHERE o.aggregate_id = f.id)`;
  assert.equal(partial!.n, 0, 'business rows and outbox rows agree');
  const report = await p.settle(180_000);
  console.log(
    `# disk full: PostgreSQL ${wasDown ? 'had shut down (PANIC on WAL write) and was restarted' : 'stayed up'} once space returned`,
  );
  recordScenario({ scenario: 'postgres.disk-full', iterations: 1, report });
});
