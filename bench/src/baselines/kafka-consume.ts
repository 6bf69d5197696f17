import { createKafka } from '@postbox/engine/kafka';
import type { Bench } from '../context.ts';
import { rate } from '../report.ts';
import { benchTopic, deleteTopics, kafka, perSecond, progressBar, trackGroup, uniqueName, until } from '../support.ts';
import { fillTopic } from '../workload/fill.ts';

/**
 * Raw kafkajs consume: a new group reads a pre-filled topic of N bench records with eachBatch, doing nothing with
 * them (offsets committed by kafkajs after each batch). Timed from the first record to the last: the group join
 * is left out. Bounds every consumer figure.
 */
export async function kafkaConsumeBaseline({ options, report }: Bench): Promise<void> {
  const topic = await benchTopic('consume', options.partitions);
  const consumer = createKafka(kafka).consumer({
    groupId: trackGroup(uniqueName('bench-raw-consume')),
    maxBytes: 8 * 1024 * 1024,
    maxWaitTimeInMs: 250,
  });
  try {
    await fillTopic(
      { topic, events: options.events, payload: options.payload },
      progressBar('fill topic (raw consume)', options.events),
    );
    const bar = progressBar('raw kafkajs consume', options.events);
    let seen = 0;
    let first = 0;
    let last = 0;
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    await consumer.run({
      eachBatch: async ({ batch }) => {
        if (seen === 0) first = performance.now();
        seen += batch.messages.length;
        last = performance.now();
        bar(Math.min(seen, options.events));
      },
    });
    await until(() => seen >= options.events, `raw consumer to read ${options.events} records (has ${seen})`, 120_000);
    // The first batch's own fetch is not in [first, last]: count from the records after it.
    const eventsPerSecond = perSecond(options.events, (last - first) / 1000);
    report.results.baselines.kafkaConsume = { eventsPerSecond, events: options.events, seconds: (last - first) / 1000 };
    report.row(
      'baseline',
      'raw kafkajs consume (eachBatch, no work)',
      rate(eventsPerSecond),
      [],
      'first record to last, join excluded',
    );
  } finally {
    await consumer.disconnect().catch(() => {});
    await deleteTopics([topic]);
  }
}
