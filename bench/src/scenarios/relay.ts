import { PlatformaticKafkaPublisher } from '@postbox/engine/kafka-platformatic';
import type { Publisher } from '@postbox/engine/runtime';
import type { BrokerConnection } from '@postbox/workers';
import type { Bench } from '../context.ts';
import { rate, ratio } from '../report.ts';
import { BROKER_LABEL, brokerConnection, brokerTopic } from '../brokers.ts';
import {
  benchDatabase,
  benchTopic,
  deleteTopics,
  kafka,
  perSecond,
  progressBar,
  until,
  type BenchDatabase,
} from '../support.ts';
import { fillOutbox } from '../workload/fill.ts';
import { startRelay } from '../workload/pipeline.ts';

/**
 * The relay alone: a pre-filled outbox of N rows drained to Kafka by one in-process relay with 0 (main thread),
 * 1, 2, 4 pool threads, then on the main thread through the engine's @platformatic/kafka publisher
 * (POSTBOX_KAFKA_PUBLISHER=platformatic). Each run: the relay is
 * started and warmed on an empty outbox, N rows appear in one commit, the clock runs until all are published.
 * With `--broker` naming nats or rabbitmq, the same runs to NATS JetStream (a stream per partition) or RabbitMQ
 * (quorum queues per partition), beside that broker's raw publishing.
 */
export async function relayScenario(bench: Bench): Promise<void> {
  if (bench.options.brokers.includes('kafka')) await relayToKafka(bench);
  if (bench.options.brokers.includes('nats')) await relayToBroker(bench, 'nats');
  if (bench.options.brokers.includes('rabbitmq')) await relayToBroker(bench, 'rabbitmq');
}

/** Result keys and the raw publish baseline of each broker besides Kafka. */
const OTHER_BROKERS = {
  nats: { result: 'relayNats', baseline: 'natsPublish', raw: 'raw JetStream publish' },
  rabbitmq: { result: 'relayRabbitmq', baseline: 'rabbitmqPublish', raw: 'raw RabbitMQ publish' },
} as const;

/**
 * The relay publishing to NATS JetStream or RabbitMQ, by pool size, as a ratio to that broker's raw publishing.
 * Each run gets a topic of its own (RabbitMQ's queues would otherwise keep every earlier run's messages).
 */
async function relayToBroker({ options, report }: Bench, broker: 'nats' | 'rabbitmq'): Promise<void> {
  const db = await benchDatabase(4);
  const names = OTHER_BROKERS[broker];
  try {
    const byThreads: Record<string, number> = {};
    for (const threads of options.threads) {
      const target = await brokerTopic(broker, 'relay', options.partitions, ['bench']);
      try {
        byThreads[threads] = await drainOnce(db, target.topic, options, threads, null, {
          broker: brokerConnection(broker),
          partitions: target.partitions,
        });
      } finally {
        await target.drop();
      }
    }
    const raw = report.baseline(names.baseline);
    const [bestThreads, best] = Object.entries(byThreads).sort((a, b) => b[1] - a[1])[0]!;
    report.results.scenarios[names.result] = {
      eventsPerSecond: best,
      bestThreads: Number(bestThreads),
      byThreads,
      [`ratioTo${names.baseline[0]!.toUpperCase()}${names.baseline.slice(1)}`]: ratio(best, raw),
      events: options.events,
      batch: options.batch,
    };
    for (const t of options.threads)
      report.row(
        'relay',
        `relay to ${BROKER_LABEL[broker]}, ${t === 0 ? 'main thread' : `${t} pool thread${t > 1 ? 's' : ''}`}`,
        rate(byThreads[t]!),
        [[names.raw, ratio(byThreads[t]!, raw)]],
        t === Number(bestThreads) ? 'best' : '',
      );
  } finally {
    await db.drop();
  }
}

async function relayToKafka({ options, report }: Bench): Promise<void> {
  const db = await benchDatabase(4);
  const topic = await benchTopic('relay', options.partitions);
  try {
    const byThreads: Record<string, number> = {};
    for (const threads of options.threads) byThreads[threads] = await drainOnce(db, topic, options, threads, null);
    const platformatic = await drainOnce(
      db,
      topic,
      options,
      0,
      new PlatformaticKafkaPublisher({ ...kafka, clientId: 'postbox-bench-relay' }),
    ).catch((cause: unknown) => cause as Error);
    const [bestThreads, best] = Object.entries(byThreads).sort((a, b) => b[1] - a[1])[0]!;
    const naive = report.baseline('naiveRelay');
    const peer = report.peer('pgTransactionalOutbox');
    const claimMark = report.baseline('claimMark');
    const readMark = report.baseline('readMark');
    const produce = report.baseline('kafkaProduce');
    report.results.scenarios.relay = {
      eventsPerSecond: best,
      bestThreads: Number(bestThreads),
      byThreads,
      ratioToNaive: ratio(best, naive),
      ratioToPeer: ratio(best, peer),
      ratioToClaimMark: ratio(best, claimMark),
      ratioToReadMark: ratio(best, readMark),
      ratioToKafkaProduce: ratio(best, produce),
      events: options.events,
      batch: options.batch,
    };
    for (const t of options.threads) {
      const v = byThreads[t]!;
      report.row(
        'relay',
        `relay, ${t === 0 ? 'main thread' : `${t} pool thread${t > 1 ? 's' : ''}`}`,
        rate(v),
        [
          ['naive relay', ratio(v, naive)],
          ['pg-transactional-outbox', ratio(v, peer)],
          ['raw claim+mark', ratio(v, claimMark)],
          ['raw read+mark', ratio(v, readMark)],
          ['raw produce', ratio(v, produce)],
        ],
        t === Number(bestThreads) ? 'best' : '',
      );
    }
    if (platformatic instanceof Error) {
      report.results.peers.platformaticKafka = {
        error: `${platformatic.message}: ${String(platformatic.cause ?? '')}`,
      };
      report.row('peer', '@platformatic/kafka adapter (main thread)', 'failed', [], platformatic.message.slice(0, 60));
    } else {
      report.results.peers.platformaticKafka = {
        eventsPerSecond: platformatic,
        threads: 0,
        ratioToKafkajsAdapter: ratio(platformatic, byThreads[0]),
      };
      report.row(
        'peer',
        'relay via @platformatic/kafka adapter (main thread)',
        rate(platformatic),
        [['kafkajs adapter, main thread', ratio(platformatic, byThreads[0])]],
        'Publisher port, same contract',
      );
    }
  } finally {
    await db.drop();
    await deleteTopics([topic]);
  }
}

async function drainOnce(
  db: BenchDatabase,
  topic: string,
  options: Bench['options'],
  threads: number,
  publisher: Publisher | null,
  target: { broker: BrokerConnection; partitions: ReadonlyMap<string, number> } | null = null,
): Promise<number> {
  await db.sql`TRUNCATE message_outbox`;
  const running = await startRelay(db, {
    threads,
    batch: options.batch,
    ...(publisher ? { publisher } : {}),
    ...(target ?? {}),
  });
  try {
    await fillOutbox(db.sql, { topic, events: 1, payload: options.payload, prefix: `warm${threads}` });
    running.relay.wake();
    await until(() => running.relay.stats().published >= 1, 'the relay to publish its warm-up row', 60_000);
    const label = publisher
      ? `relay, ${publisher.constructor.name}`
      : `relay${target ? ` to ${target.broker.kind}` : ''}, ${threads} threads`;
    await fillOutbox(
      db.sql,
      { topic, events: options.events, payload: options.payload, prefix: `r${threads}` },
      progressBar(`fill outbox (${label})`, options.events),
    );
    const started = performance.now();
    running.relay.wake();
    const bar = progressBar(label, options.events);
    await until(
      () => {
        const n = running.relay.stats().published - 1;
        bar(n);
        return n >= options.events;
      },
      `${label} to publish ${options.events} rows`,
      600_000,
      10,
    );
    return perSecond(options.events, (performance.now() - started) / 1000);
  } finally {
    await running.stop();
  }
}
