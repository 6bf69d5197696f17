import type { Message, RecordMetadata } from 'kafkajs';
import { BrokerError } from '../../errors.ts';
import type { OutboundMessage, PublishOutcome } from '../../ports/publisher.ts';

/**
 * Each message's outcome from the broker's answer: its partition's base offset plus its place in the request. A
 * partition the answer does not cover was not confirmed — kafkajs resolves a send whose retry skipped a partition
 * whose leader moved to a broker that had already answered (seen in a rolling restart of a cluster) — so its
 * messages are unknown, never confirmed at a made-up offset.
 */
export function confirmations(
  messages: OutboundMessage[],
  sent: Message[],
  metadata: RecordMetadata[],
  chosen: WeakMap<Message, number>,
): PublishOutcome[] {
  const base = new Map<string, bigint>();
  for (const m of metadata)
    if (m.baseOffset !== undefined && BigInt(m.baseOffset) >= 0n)
      base.set(`${m.topicName}\u0000${m.partition}`, BigInt(m.baseOffset));
  const seen = new Map<string, bigint>();
  return messages.map((m, i): PublishOutcome => {
    const partition = chosen.get(sent[i]!)!;
    const slot = `${m.topic}\u0000${partition}`;
    const index = seen.get(slot) ?? 0n;
    seen.set(slot, index + 1n);
    const first = base.get(slot);
    if (first === undefined)
      return {
        ok: false,
        error: new BrokerError(
          'publish_unconfirmed',
          'unknown',
          `the broker's answer did not confirm ${m.topic} partition ${partition}`,
        ),
      };
    return { ok: true, confirmation: { partition, offset: (first + index).toString() } };
  });
}
