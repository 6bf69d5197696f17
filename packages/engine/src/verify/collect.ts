import type { Sql } from '../db/connect.ts';
import { fingerprint } from '../envelope/fingerprint.ts';
import type { BrokerOffsets } from '../ports/offsets.ts';
import type { InboundRecord } from '../ports/subscriber.ts';
import type { TopicReader } from '../ports/topic-reader.ts';
import {
  blockedFacts,
  failureFacts,
  inboxFacts,
  outboxFacts,
  parkedFacts,
  retryFacts,
  versionFacts,
} from '../queries/verify-state.ts';
import { sagaFacts } from '../queries/verify-sagas.ts';
import { readEffects, type EffectSource } from './effect-source.ts';
import type { ConsumerFacts, Observation, RecordFact } from '../records/observation.ts';

/** A consumer to verify: its name (inbox, failures, ledger), group (committed offsets), topics and effects. */
export interface VerifyConsumer {
  name: string;
  groupId: string;
  topics: string[];
  /** @defaultValue none: double effects are not checked, order only by the engine's state */
  effects?: EffectSource;
}

export interface CollectDeps {
  sql: Sql;
  reader: TopicReader;
  offsets: BrokerOffsets;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Collects an Observation (see records/observation.ts for why in this order): the log, then each group's committed
 * offsets, then PostgreSQL in one read-only repeatable-read transaction. Holds one small fact per record and
 * per row: memory grows with the number of events observed.
 */
export async function collect(
  deps: CollectDeps,
  consumers: VerifyConsumer[],
  extraTopics: string[] = [],
): Promise<Observation> {
  const at = Date.now();
  const topics = [...new Set([...consumers.flatMap((c) => c.topics), ...extraTopics])].sort();
  const records: RecordFact[] = [];
  const partitions = await deps.reader.read(topics, (r) => records.push(recordFact(r)));
  const committed = new Map<string, ConsumerFacts['committed']>();
  for (const c of consumers) {
    const positions = await deps.offsets.positions(c.groupId, c.topics);
    committed.set(
      c.name,
      positions
        .filter((p) => p.committed !== null)
        .map((p) => ({ topic: p.topic, partition: p.partition, offset: p.committed! })),
    );
  }
  return deps.sql.begin('isolation level repeatable read read only', async (tx) => {
    const outbox = await outboxFacts(tx, topics);
    const facts: ConsumerFacts[] = [];
    for (const c of consumers) {
      facts.push({
        name: c.name,
        groupId: c.groupId,
        topics: c.topics,
        committed: committed.get(c.name)!,
        inbox: await inboxFacts(tx, c.name),
        versions: await versionFacts(tx, c.name),
        failures: await failureFacts(tx, c.name),
        retries: await retryFacts(tx, c.name),
        parked: await parkedFacts(tx, c.name),
        blocked: await blockedFacts(tx, c.name),
        effects: c.effects ? await readEffects(tx, c.effects, c.name) : null,
      });
    }
    return { at, outbox, partitions, records, consumers: facts, sagas: await sagaFacts(tx) };
  });
}

function recordFact(r: InboundRecord): RecordFact {
  const id = r.headers.id;
  const version = Number(r.headers.aggregateversion);
  return {
    topic: r.topic,
    partition: r.partition,
    offset: r.offset,
    key: r.key,
    eventId: id && UUID.test(id) ? id.toLowerCase() : null,
    version: Number.isSafeInteger(version) && version >= 1 ? version : null,
    fingerprint: fingerprint(r).toString('hex'),
  };
}
