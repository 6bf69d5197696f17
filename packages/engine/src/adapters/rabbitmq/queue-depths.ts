import type { AMQPBaseClient, AMQPChannel } from '@cloudamqp/amqp-client';
import { closeChannel } from './connection.ts';

/**
 * The ready messages of each queue (a passive declare: what the broker has not delivered, not what consumers hold
 * unacknowledged), in order; null for a queue that does not exist. A passive declare of a missing queue closes
 * its channel: the next queue is asked on a fresh one.
 */
export async function queueDepths(connection: AMQPBaseClient, queues: string[]): Promise<Array<number | null>> {
  const depths: Array<number | null> = [];
  let channel: AMQPChannel | null = null;
  try {
    for (const queue of queues) {
      if (!channel || channel.closed) channel = await connection.channel();
      try {
        depths.push((await channel.queueDeclare(queue, { passive: true })).messageCount);
      } catch (cause) {
        if (!/NOT_FOUND|no queue/i.test((cause as Error).message)) throw cause;
        depths.push(null);
      }
    }
    return depths;
  } finally {
    if (channel) await closeChannel(channel);
  }
}
