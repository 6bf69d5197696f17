import type { AMQPChannel, AMQPMessage } from '@cloudamqp/amqp-client';

/**
 * Every message in a queue, in queue order, taken off it (acknowledged). Quorum queues with single-active-consumer
 * refuse basic.get: the queue is consumed until it has given the count it held when asked.
 */
export async function drainQueue(ch: AMQPChannel, queue: string, timeoutMs = 30_000): Promise<AMQPMessage[]> {
  const { messageCount } = await ch.queueDeclare(queue, { passive: true });
  if (messageCount === 0) return [];
  const messages: AMQPMessage[] = [];
  let done!: () => void;
  const all = new Promise<void>((resolve) => (done = resolve));
  const consumer = await ch.basicConsume(queue, { noAck: true }, (m) => {
    messages.push(m);
    if (messages.length >= messageCount) done();
  });
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`${queue}: ${messages.length} of ${messageCount} messages within ${timeoutMs} ms`)),
      timeoutMs,
    );
  });
  try {
    await Promise.race([all, timeout]);
  } finally {
    clearTimeout(timer);
    await consumer.cancel();
  }
  return messages;
}
