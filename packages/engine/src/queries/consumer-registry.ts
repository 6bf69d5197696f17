import type { Queryable } from '../db/connect.ts';

export interface RegisteredConsumer {
  consumer_name: string;
  group_id: string;
  topics: string[];
  started_at: Date;
  seen_at: Date;
}

/** A consumer announces itself at start: its group and topics. Parameters: name, group, topics. Locks: the row. */
export async function registerConsumer(
  sql: Queryable,
  c: { name: string; groupId: string; topics: string[] },
): Promise<void> {
  await sql`
    INSERT INTO consumer_registry (consumer_name, group_id, topics)
    VALUES (${c.name}, ${c.groupId}, ${c.topics}::text[])
    ON CONFLICT (consumer_name) DO UPDATE
      SET group_id = EXCLUDED.group_id, topics = EXCLUDED.topics, started_at = now(), seen_at = now()`;
}

/** Every consumer that ever started here, by name. Locks: none. */
export async function listConsumers(sql: Queryable): Promise<RegisteredConsumer[]> {
  return [
    ...(await sql<RegisteredConsumer[]>`
    SELECT consumer_name, group_id, topics, started_at, seen_at FROM consumer_registry ORDER BY consumer_name`),
  ];
}

/** Every topic a registered consumer reads, once each, sorted. Locks: none. */
export async function registeredTopics(sql: Queryable): Promise<string[]> {
  const rows = await sql<{ topic: string }[]>`
    SELECT DISTINCT unnest(topics) AS topic FROM consumer_registry ORDER BY 1`;
  return rows.map((r) => r.topic);
}
