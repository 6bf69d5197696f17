import type { Consumer as KafkaConsumer, KafkaMessage } from 'kafkajs';
import type { TopicPartition } from '../../ports/subscriber.ts';

/** The rest of a fetched batch the sink did not take (it was at its caps), handed over when it resumes. */
interface HeldBatch {
  topic: string;
  partition: number;
  messages: KafkaMessage[];
}

/** Hands fetched records to the sink; returns how many it took (it stops taking at its caps). */
export type Offer = (topic: string, partition: number, messages: KafkaMessage[]) => number;

/**
 * The subscriber's pause and resume, without waste: when the sink stops taking a fetched batch midway (at its
 * caps), the rest is held here — at most one fetch response, `maxBytes` — its partition paused in kafkajs and the
 * fetch position moved past it; when the sink resumes the partition, the held records are offered first and the
 * partition resumes in kafkajs only once they are all taken. Resuming costs no fetch: kafkajs, with every
 * partition paused, sleeps `maxWaitTime` before it looks again, and a fetch answered while paused is thrown away
 * after decoding, so a consumer that pauses and resumes at its caps would spend much of its time waiting for
 * records it has already fetched (the consumer bench: 2.4× from a wider cap alone).
 *
 * Invariant: a partition is paused in kafkajs while the sink has paused it or part of a batch of it is held.
 */
export class Backpressure {
  readonly #member: () => KafkaConsumer;
  readonly #offer: Offer;
  /** Partitions the sink paused, and batch rests held per partition (both keep a partition paused in kafkajs). */
  readonly #sinkPaused = new Set<string>();
  readonly #held = new Map<string, HeldBatch>();

  /** `member`: the group member now (a crashed one is replaced); `offer`: how records reach the sink. */
  constructor(member: () => KafkaConsumer, offer: Offer) {
    this.#member = member;
    this.#offer = offer;
  }

  /** A batch fetched before its partition's pause took effect: left unresolved, fetched again on resume. */
  turnsAway(topic: string, partition: number): boolean {
    const key = `${topic}:${partition}`;
    return this.#held.has(key) || this.#sinkPaused.has(key);
  }

  /** Keeps what the sink did not take of a fetched batch, and pauses its partition until the sink resumes it. */
  hold(topic: string, partition: number, rest: KafkaMessage[]): void {
    this.#held.set(`${topic}:${partition}`, { topic, partition, messages: rest });
    this.#applyPause(topic, [partition]);
  }

  // Between a crash and the member's restart kafkajs has no group to pause and throws; nothing is fetched then,
  // and the caller pauses again on the next assignment.
  pause(partitions: TopicPartition[]): void {
    for (const p of partitions) this.#sinkPaused.add(`${p.topic}:${p.partition}`);
    for (const [topic, list] of byTopic(partitions)) this.#applyPause(topic, list);
  }

  /**
   * Held records first: each resumed partition's rest is offered until the sink stops taking (it may pause
   * again meanwhile); a partition resumes in kafkajs once nothing of it is held and the sink has not paused it.
   */
  resume(partitions: TopicPartition[]): void {
    for (const p of partitions) this.#sinkPaused.delete(`${p.topic}:${p.partition}`);
    for (const p of partitions) {
      const key = `${p.topic}:${p.partition}`;
      const held = this.#held.get(key);
      if (held && !this.#sinkPaused.has(key)) {
        const taken = this.#offer(held.topic, held.partition, held.messages);
        if (taken >= held.messages.length) this.#held.delete(key);
        else held.messages = held.messages.slice(taken);
      }
    }
    // Decided after the offers, which may have paused the sink again: a partition resumed in kafkajs while this
    // side turns its batches away would be fetched, decoded and dropped in a loop.
    const fetchAgain = partitions.filter((p) => {
      const key = `${p.topic}:${p.partition}`;
      return !this.#held.has(key) && !this.#sinkPaused.has(key);
    });
    for (const [topic, list] of byTopic(fetchAgain))
      ignoreNotRunning(() => this.#member().resume([{ topic, partitions: list }]));
  }

  /**
   * A new assignment: kafkajs fetches again from the committed offsets, so what was held is dropped, and its
   * partitions resume in kafkajs (pauses outlive a rebalance there) unless the sink paused them. The sink's
   * pauses of partitions no longer assigned are forgotten: it pauses its new assignment again itself.
   */
  dropHeld(assigned: TopicPartition[]): void {
    const now = new Set(assigned.map((p) => `${p.topic}:${p.partition}`));
    for (const key of this.#sinkPaused) if (!now.has(key)) this.#sinkPaused.delete(key);
    const release = [...this.#held.entries()]
      .filter(([key]) => !this.#sinkPaused.has(key))
      .map(([, h]) => ({ topic: h.topic, partition: h.partition }));
    this.#held.clear();
    for (const [topic, list] of byTopic(release))
      ignoreNotRunning(() => this.#member().resume([{ topic, partitions: list }]));
  }

  #applyPause(topic: string, partitions: number[]): void {
    ignoreNotRunning(() => this.#member().pause([{ topic, partitions }]));
  }
}

function ignoreNotRunning(call: () => void): void {
  try {
    call();
  } catch (cause) {
    if (!/not initialized|consumer#run must be called/i.test((cause as Error).message)) throw cause;
  }
}

function byTopic(partitions: TopicPartition[]): Map<string, number[]> {
  const map = new Map<string, number[]>();
  for (const p of partitions) map.set(p.topic, [...(map.get(p.topic) ?? []), p.partition]);
  return map;
}
