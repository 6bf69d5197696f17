import {
  AckPolicy,
  DeliverPolicy,
  JetStreamApiCodes,
  JetStreamApiError,
  type ConsumerConfig,
  type ConsumerInfo,
  type JetStreamManager,
} from '@nats-io/jetstream';
import { nanos } from '@nats-io/transport-node';

/** A consumer group's name on NATS: names allow no dots, wildcards or spaces. */
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

/** The durable a member reads through, and the stream sequence its first delivery should carry. */
export interface TakenDurable {
  name: string;
  startSeq: number;
}

const EPOCH = /__(\d+)$/;

/**
 * The group's current durable on a partition stream: `<group>__<epoch>`, the highest epoch, with its info; null
 * when the group has none there.
 */
export async function currentDurable(
  jsm: JetStreamManager,
  stream: string,
  groupId: string,
): Promise<{ name: string; epoch: number; info: ConsumerInfo } | null> {
  const mine = await groupDurables(jsm, stream, groupId);
  return mine.at(-1) ?? null;
}

async function groupDurables(jsm: JetStreamManager, stream: string, groupId: string) {
  const base = `${durableName(groupId)}__`;
  const out: Array<{ name: string; epoch: number; info: ConsumerInfo }> = [];
  for await (const info of jsm.consumers.list(stream)) {
    const epoch = info.name.startsWith(base) ? EPOCH.exec(info.name) : null;
    if (epoch && info.name.length === base.length + epoch[1]!.length)
      out.push({ name: info.name, epoch: Number(epoch[1]), info });
  }
  return out.sort((a, b) => a.epoch - b.epoch);
}

function config(name: string, settings: DurableSettings, startSeq: number): Partial<ConsumerConfig> {
  return {
    durable_name: name,
    // Acknowledging sequence s acknowledges everything before it: the watermark commit Kafka's offsets give.
    ack_policy: AckPolicy.All,
    deliver_policy: DeliverPolicy.StartSequence,
    opt_start_seq: startSeq,
    max_ack_pending: settings.maxAckPending,
    ack_wait: nanos(settings.ackWaitMs),
    // Postbox owns retries and dead letters (retry schedule, failure store): the broker redelivers for ever.
    max_deliver: -1,
  };
}

/**
 * Makes a fresh durable for a member that has just taken a partition over, one epoch past the group's current
 * one and starting at its ack floor + 1, then deletes the earlier ones. Messages delivered to an earlier holder
 * and never acknowledged are read again at once, in order (JetStream would redeliver them only after their ack
 * wait, behind newer ones); and an earlier holder still reading — or acknowledging late — talks to a durable
 * that no longer exists, so it can neither take messages of this epoch nor move its ack floor (an AckAll carries
 * the old durable's delivery sequence, which would otherwise stall the new one's floor). The new durable is made
 * before the old ones go: a crash in between leaves two, and the next take-over starts from the newest.
 */
export async function takeOverDurable(
  jsm: JetStreamManager,
  stream: string,
  groupId: string,
  settings: DurableSettings,
): Promise<TakenDurable> {
  const earlier = await groupDurables(jsm, stream, groupId);
  const current = earlier.at(-1);
  let startSeq: number;
  if (current) startSeq = current.info.ack_floor.stream_seq + 1;
  else {
    const { state } = await jsm.streams.info(stream);
    startSeq = settings.fromBeginning ? Math.max(1, state.first_seq) : state.last_seq + 1;
  }
  const name = `${durableName(groupId)}__${(current?.epoch ?? 0) + 1}`;
  await jsm.consumers.add(stream, config(name, settings, startSeq));
  for (const old of earlier) await jsm.consumers.delete(stream, old.name).catch(ignoreNotFound);
  return { name, startSeq };
}

function ignoreNotFound(cause: unknown): void {
  if (cause instanceof JetStreamApiError && cause.code === JetStreamApiCodes.ConsumerNotFound) return;
  throw cause;
}
