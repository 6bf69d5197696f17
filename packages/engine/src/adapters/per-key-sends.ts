import { BrokerError, type PostboxError } from '../errors.ts';
import type { OutboundMessage, PublishOutcome } from '../ports/publisher.ts';

/**
 * Sends a batch the way a broker without a per-partition producer sequence keeps per-key order (NATS, RabbitMQ):
 * the messages of one key one after the other, each once the previous one is confirmed; keys in parallel. A
 * message that fails transiently or with an unknown outcome stops its key there: the messages after it get the
 * same outcome unsent, so nothing overtakes a message that is to be retried. A permanent failure (an oversize
 * message) does not stop its key. Nothing starts after the deadline. One outcome per message, in order.
 */
export async function sendPerKey(
  messages: OutboundMessage[],
  deadline: number,
  sendOne: (message: OutboundMessage, timeoutMs: number) => Promise<PublishOutcome>,
): Promise<PublishOutcome[]> {
  const outcomes: PublishOutcome[] = new Array(messages.length);
  const byKey = new Map<string, number[]>();
  for (let i = 0; i < messages.length; i++) {
    const list = byKey.get(messages[i]!.key) ?? [];
    list.push(i);
    byKey.set(messages[i]!.key, list);
  }
  await Promise.all(
    [...byKey.values()].map(async (indexes) => {
      let stop: PostboxError | null = null;
      for (const i of indexes) {
        const left = deadline - Date.now();
        if (!stop && left <= 0)
          stop = new BrokerError('publish_timeout', 'transient', 'publish deadline passed before the send started');
        if (stop) {
          outcomes[i] = { ok: false, error: stop };
          continue;
        }
        const outcome = await sendOne(messages[i]!, left);
        outcomes[i] = outcome;
        if (!outcome.ok && outcome.error.kind !== 'permanent') stop = outcome.error;
      }
    }),
  );
  return outcomes;
}
