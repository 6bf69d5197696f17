import { BrokerError } from '../../errors.ts';
import type { OutboundMessage, PublishOptions, PublishOutcome } from '../../ports/publisher.ts';

/** One send on the producer current when it starts, and how to give that producer up. */
export interface ProducerSend {
  result: Promise<PublishOutcome[]>;
  /** Replaces the producer this send used (no-op if it was replaced already): its late retries cannot collide. */
  abandon(): void;
}

/**
 * How both Kafka publishers send (publisher.ts over kafkajs, platformatic-publisher.ts): one request at a time
 * per producer, each by the caller's deadline, and a request the broker refuses as too large split until the
 * record that is too large fails alone.
 *
 * One at a time: an idempotent producer numbers each partition's records, and a failed request's numbers must not
 * be taken by a request queued behind it (publisher.ts's class comment says what that does with kafkajs). A send
 * with no answer within `stallMs`, or by its deadline, abandons its producer, so the sends queued behind it go on
 * with a fresh one and nothing of it reaches the log after it was reported unknown.
 */
export class SendQueue {
  readonly #start: (messages: OutboundMessage[]) => ProducerSend;
  readonly #stallMs: number;
  // The send in progress (settled, never rejected): the next one starts after it.
  #tail: Promise<unknown> = Promise.resolve();

  constructor(start: (messages: OutboundMessage[]) => ProducerSend, stallMs: number) {
    this.#start = start;
    this.#stallMs = stallMs;
  }

  /**
   * Sends the messages, confirming each. A broker refusing a request as too large (a record over the topic's
   * max.message.bytes, or a partition's records together over it) says nothing about which record: the request is
   * split in halves, in order, until each part is accepted or is one record, which alone fails permanently — so
   * one oversize event never fails its neighbours. Any other failure of a part stops there: the records after
   * it get the same outcome unsent, and nothing overtakes a record that is to be retried.
   */
  publish(messages: OutboundMessage[], options: PublishOptions = {}): Promise<PublishOutcome[]> {
    if (messages.length === 0) return Promise.resolve([]);
    const deadline = options.timeoutMs === undefined ? Infinity : Date.now() + options.timeoutMs;
    return this.#publishBy(messages, deadline);
  }

  /** Resolves when the send in progress (if any) has settled. */
  idle(): Promise<void> {
    return this.#tail.then(() => {});
  }

  async #publishBy(messages: OutboundMessage[], deadline: number): Promise<PublishOutcome[]> {
    const outcomes = await this.#queued(messages, deadline);
    const first = outcomes.find((o) => !o.ok);
    if (!first || first.ok || !TOO_LARGE.has(first.error.code) || messages.length === 1) return outcomes;
    const half = Math.ceil(messages.length / 2);
    const left = await this.#publishBy(messages.slice(0, half), deadline);
    const stop = left.find((o) => !o.ok && o.error.kind !== 'permanent');
    const right = stop ? messages.slice(half).map(() => stop) : await this.#publishBy(messages.slice(half), deadline);
    return [...left, ...right];
  }

  /**
   * One send at a time. The caller hears by its deadline (unknown if not confirmed by then; a send whose turn
   * comes after the deadline is not made).
   */
  #queued(messages: OutboundMessage[], deadline: number): Promise<PublishOutcome[]> {
    const run = this.#tail.then(async (): Promise<PublishOutcome[]> => {
      if (deadline <= Date.now())
        return unsent(
          messages,
          new BrokerError('publish_timeout', 'transient', 'publish deadline passed before the send started'),
        );
      const send = this.#start(messages);
      // A send still out at its deadline is abandoned with its producer there, not only once it stalls: the
      // caller treats it as unknown from the deadline on (the relay re-sends it, perhaps from another relay, once
      // its lease has run out), so nothing of it may reach the log later.
      const atDeadline = deadline - Date.now() < this.#stallMs;
      let timer: NodeJS.Timeout | undefined;
      const stalled = new Promise<PublishOutcome[]>((resolve) => {
        timer = setTimeout(
          () => {
            send.abandon();
            const why = atDeadline
              ? 'not confirmed by the publish deadline; producer replaced'
              : `the broker did not answer within ${this.#stallMs} ms; producer replaced`;
            resolve(unsent(messages, new BrokerError('publish_timeout', 'unknown', why)));
          },
          atDeadline ? Math.max(0, deadline - Date.now()) : this.#stallMs,
        );
      });
      try {
        return await Promise.race([send.result, stalled]);
      } finally {
        clearTimeout(timer);
      }
    });
    this.#tail = run.catch(() => {});
    return deadline === Infinity ? run : byDeadline(run, deadline, messages);
  }
}

async function byDeadline(
  run: Promise<PublishOutcome[]>,
  deadline: number,
  messages: OutboundMessage[],
): Promise<PublishOutcome[]> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<PublishOutcome[]>((resolve) => {
    timer = setTimeout(
      () =>
        resolve(
          unsent(messages, new BrokerError('publish_timeout', 'unknown', 'not confirmed by the publish deadline')),
        ),
      Math.max(0, deadline - Date.now()),
    );
  });
  try {
    return await Promise.race([run, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** The same failure for every message of a send. */
export function unsent(messages: OutboundMessage[], error: BrokerError): PublishOutcome[] {
  return messages.map(() => ({ ok: false, error }));
}

// A request over the broker's size limit; which of its records caused it is unknown until split.
const TOO_LARGE = new Set(['kafka_message_too_large', 'kafka_record_list_too_large']);
