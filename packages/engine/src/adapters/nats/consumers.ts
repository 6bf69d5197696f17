import {
  AckPolicy,
  DeliverPolicy,
  JetStreamApiCodes,
  JetStreamApiError,
  type ConsumerConfig,
  type JetStreamManager,
} from '@nats-io/jetstream';
import { nanos } from '@nats-io/transport-node';

/** A consumer group's durable name on a partition stream: NATS names allow no dots, wildcards or spaces. */
export function durableName(groupId: string): string {
  return groupId.replace(/[^A-Za-z0-9_-]/g, '_');
}

export interface DurableSettings {
  /** Where a group with no durable yet starts: the stream's first message, or the next one written. */
  fromBeginning: boolean;
  /** Messages delivered and not yet acknowledged, at most (the prefetch). */
  maxAckPending: number;
  ackWaitMs: number;
}

function config(name: string, settings: DurableSettings): Partial<ConsumerConfig> {
  return {
    durable_name: name,
    // Acknowledging sequence s acknowledges everything before it: the watermark commit Kafka's offsets give.
    ack_policy: AckPolicy.All,
    deliver_policy: settings.fromBeginning ? DeliverPolicy.All : DeliverPolicy.New,
    max_ack_pending: settings.maxAckPending,
    ack_wait: nanos(settings.ackWaitMs),
    // Postbox owns retries and dead letters (retry schedule, failure store): the broker redelivers for ever.
    max_deliver: -1,
  };
}

/**
 * Makes the group's durable pull consumer on a partition stream ready for a member that has just taken the
 * partition over. Messages delivered to an earlier holder and never acknowledged would come back only after
 * their ack wait, behind newer ones, out of order: the consumer is then made again from its ack floor, so
 * reading starts at the first unacknowledged message at once. Safe because only the lease holder does this, and
 * an acknowledgement from a late earlier holder is still true (it acknowledges only work durable in the inbox).
 */
export async function takeOverDurable(
  jsm: JetStreamManager,
  stream: string,
  name: string,
  settings: DurableSettings,
): Promise<void> {
  const info = await jsm.consumers.info(stream, name).catch((cause: unknown) => {
    if (isNotFound(cause)) return null;
    throw cause;
  });
  if (!info) {
    await jsm.consumers.add(stream, config(name, settings));
    return;
  }
  const c = info.config;
  const sameShape =
    c.ack_policy === AckPolicy.All &&
    c.max_ack_pending === settings.maxAckPending &&
    c.ack_wait === nanos(settings.ackWaitMs) &&
    (c.max_deliver ?? -1) <= 0;
  if (sameShape && info.num_ack_pending === 0) return;
  await jsm.consumers.delete(stream, name);
  await jsm.consumers.add(stream, {
    ...config(name, settings),
    deliver_policy: DeliverPolicy.StartSequence,
    opt_start_seq: info.ack_floor.stream_seq + 1,
  });
}

function isNotFound(cause: unknown): boolean {
  return cause instanceof JetStreamApiError && cause.code === JetStreamApiCodes.ConsumerNotFound;
}
