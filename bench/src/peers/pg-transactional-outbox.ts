import { createKafka } from '@postbox/engine/kafka';
import { Partitioners } from 'kafkajs';
import {
  DatabaseSetup,
  getDisabledLogger,
  initializePollingMessageListener,
  type GeneralMessageHandler,
  type TransactionalMessage,
} from 'pg-transactional-outbox';
import type { Bench } from '../context.ts';
import { rate } from '../report.ts';
import { benchDatabase, benchTopic, deleteTopics, kafka, perSecond, progressBar, sleep } from '../support.ts';

const TABLE = 'pto_outbox';
const NEXT = 'pto_next_outbox_messages';

/**
 * The peer: pg-transactional-outbox's outbox → polling listener path on the same PostgreSQL, publishing each
 * message with a kafkajs producer (acks = all, idempotent), as its README's message publisher does. Its own
 * schema and polling function (DatabaseSetup), a pre-filled outbox of N rows with one segment per aggregate
 * (its per-aggregate order, like Postbox's), batch size = the relay's from the first poll, a 10 ms poll. Logical replication would
 * need wal_level=logical, which the bench does not change on a shared server; the polling listener needs nothing.
 * Measured for one window (its claim scans every unprocessed row, so a long outbox is slow to drain).
 */
export async function pgTransactionalOutboxPeer({ options, report }: Bench): Promise<void> {
  const db = await benchDatabase(4);
  const topic = await benchTopic('pto', options.partitions);
  const producer = createKafka(kafka).producer({
    idempotent: true,
    maxInFlightRequests: 1,
    allowAutoTopicCreation: false,
    createPartitioner: Partitioners.DefaultPartitioner,
  });
  let shutdown: (() => Promise<void>) | null = null;
  try {
    const setup = {
      outboxOrInbox: 'outbox' as const,
      database: db.name,
      schema: 'public',
      table: TABLE,
      listenerRole: 'postgres',
      nextMessagesName: NEXT,
    };
    await db.sql.unsafe(DatabaseSetup.dropAndCreateTable(setup));
    await db.sql.unsafe(DatabaseSetup.createPollingFunction(setup));
    await db.sql.unsafe(DatabaseSetup.setupPollingIndexes(setup));
    const aggregates = Math.max(1, Math.floor(options.events / 10));
    await db.sql`
      INSERT INTO pto_outbox (id, aggregate_type, aggregate_id, message_type, segment, payload, created_at)
      SELECT gen_random_uuid(), 'order', 'a-' || (i % ${aggregates}), 'OrderPlaced', 'a-' || (i % ${aggregates}),
             jsonb_build_object('pad', repeat('x', ${Math.max(0, options.payload - 10)})), c
      FROM generate_series(0, ${options.events - 1}::int) AS i, LATERAL (SELECT clock_timestamp() + i * interval '0 s' AS c) AS t`;
    await db.sql`VACUUM ANALYZE pto_outbox`;
    await producer.connect();
    let sent = 0;
    const publisher: GeneralMessageHandler = {
      handle: async (message: TransactionalMessage) => {
        await producer.send({
          topic,
          acks: -1,
          messages: [
            {
              key: message.aggregateId,
              value: JSON.stringify(message.payload),
              headers: { ce_id: message.id, ce_type: message.messageType, ce_specversion: '1.0', ce_source: 'bench' },
            },
          ],
        });
        sent++;
      },
    };
    const started = performance.now();
    [shutdown] = initializePollingMessageListener(
      {
        outboxOrInbox: 'outbox',
        dbListenerConfig: { connectionString: db.url },
        settings: {
          dbSchema: 'public',
          dbTable: TABLE,
          enableMaxAttemptsProtection: false,
          enablePoisonousMessageProtection: false,
          nextMessagesFunctionName: NEXT,
          nextMessagesBatchSize: options.batch,
          nextMessagesPollingIntervalInMs: 10,
          messageCleanupIntervalInMs: 0,
        },
      },
      publisher,
      getDisabledLogger(),
      // Its default strategy takes one message per poll for the first `batch` polls (poison protection at start-up);
      // the full batch from the first poll gives it the same start as the relay.
      { batchSizeStrategy: () => Promise.resolve(options.batch) },
    );
    const bar = progressBar('peer: pg-transactional-outbox', options.windowMs * 2);
    while (performance.now() - started < options.windowMs * 2 && sent < options.events) {
      await sleep(100);
      bar(Math.round(performance.now() - started));
    }
    bar(options.windowMs * 2);
    const seconds = (performance.now() - started) / 1000;
    const [row] = await db.sql<
      { n: number }[]
    >`SELECT count(*)::int AS n FROM pto_outbox WHERE processed_at IS NOT NULL`;
    const eventsPerSecond = perSecond(row!.n, seconds);
    report.results.peers.pgTransactionalOutbox = {
      eventsPerSecond,
      events: row!.n,
      published: sent,
      seconds,
      batch: options.batch,
      listener: 'polling',
      pollMs: 10,
    };
    report.row(
      'peer',
      'pg-transactional-outbox (polling listener → kafkajs)',
      rate(eventsPerSecond),
      [],
      `outbox rows marked processed in ${seconds.toFixed(1)} s`,
    );
  } catch (cause) {
    report.results.peers.pgTransactionalOutbox = { error: describe(cause) };
    report.row('peer', 'pg-transactional-outbox', 'failed', [], describe(cause).slice(0, 60));
  } finally {
    await shutdown?.().catch(() => {});
    await producer.disconnect().catch(() => {});
    await db.drop();
    await deleteTopics([topic]);
  }
}

const describe = (e: unknown) =>
  `${(e as Error)?.message ?? String(e)}${(e as Error)?.cause ? `: ${String((e as Error).cause)}` : ''}`;
