import type { Sql } from '@postbox/engine';
import { KafkaPublisher } from '@postbox/engine/kafka';
import { inlineExecutor, Relay, resolveRelayOptions, type RelayOptions } from '@postbox/engine/runtime';
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
