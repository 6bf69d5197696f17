import type { Sql } from '@postbox/engine';
import { KafkaPublisher } from '@postbox/engine/kafka';
import { inlineExecutor, Relay, resolveRelayOptions, type RelayOptions } from '@postbox/engine/runtime';
import { waitFor } from './processes.ts';
import { stack } from './stack.ts';

/** An in-process relay on the calling thread, for tests that need one but not its process boundary. */
export async function startTestRelay(sql: Sql, options: Partial<RelayOptions> = {}): Promise<Relay> {
  const resolved = resolveRelayOptions({ pollMs: 200, ...options });
  const publisher = new KafkaPublisher({ brokers: stack.KAFKA_BROKERS.split(','), clientId: 'postbox-test-relay' });
  const relay = new Relay({ sql, executor: inlineExecutor({ sql, publisher, options: resolved }), options: resolved });
  await relay.start();
  return relay;
}

/** Outbox rows by status (the seed's observable states: message_outbox_state). */
export async function outboxCounts(sql: Sql): Promise<Record<string, number>> {
  const rows = await sql<
    { status: string; n: number }[]
  >`SELECT status, count(*)::int AS n FROM message_outbox_state GROUP BY status`;
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

export interface PublishedRow {
  event_id: string;
  aggregate_id: string;
  broker_partition: number;
  broker_offset: string;
}

/** Waits until `count` rows of the topic are published; returns them with their stored broker positions. */
export function allPublished(sql: Sql, topic: string, count: number, timeoutMs = 60_000): Promise<PublishedRow[]> {
  return waitFor(
    `all ${count} rows of ${topic} published`,
    async () => {
      const rows = await sql<PublishedRow[]>`
        SELECT event_id, aggregate_id, broker_partition, broker_offset FROM message_outbox
        WHERE topic = ${topic} AND status = 'published'`;
      return rows.length === count ? rows : undefined;
    },
    timeoutMs,
  );
}
