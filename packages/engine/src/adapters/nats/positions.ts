import type { JetStreamManager } from '@nats-io/jetstream';
import type { PartitionPosition } from '../../ports/offsets.ts';
import { currentDurable } from './consumers.ts';
import { partitionStreams } from './streams.ts';

/** A partition's position on JetStream, beside what the group has left to acknowledge there. */
export interface NatsPartitionPosition extends PartitionPosition {
  /** Messages the group has not acknowledged: not yet delivered plus delivered and unacknowledged. */
  unacknowledged: number;
}

/**
 * Positions of every partition stream of `topics`, in stream sequences (Postbox's offsets on NATS): high = the last
 * sequence + 1 (next to be written); committed = the ack floor + 1 (next to read) of the group's current durable,
 * null when the group has none there (or `groupId` is null).
 */
export async function partitionPositions(
  jsm: JetStreamManager,
  groupId: string | null,
  topics: string[],
): Promise<NatsPartitionPosition[]> {
  const out: NatsPartitionPosition[] = [];
  for (const topic of topics) {
    for (const { name, partition } of await partitionStreams(jsm, topic)) {
      const stream = await jsm.streams.info(name);
      const durable = groupId === null ? null : ((await currentDurable(jsm, name, groupId))?.info ?? null);
      out.push({
        topic,
        partition,
        high: String(stream.state.last_seq + 1),
        committed: durable ? String(durable.ack_floor.stream_seq + 1) : null,
        unacknowledged: durable ? durable.num_pending + durable.num_ack_pending : stream.state.messages,
      });
    }
  }
  return out.sort((a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition);
}
