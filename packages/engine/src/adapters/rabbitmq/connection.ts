import { AMQPClient, type AMQPBaseClient } from '@cloudamqp/amqp-client';

/** Connects to RabbitMQ with AMQP heartbeats on (see withHeartbeat). */
export function connectRabbit(url: string): Promise<AMQPBaseClient> {
  return new AMQPClient(withHeartbeat(url)).connect();
}

/**
 * AMQP heartbeats (10 s) unless the URL sets them: without, a half-open connection (a paused node) is never seen
 * as closed — every publish would wait for its deadline on it, and a subscriber would wait for deliveries for ever.
 */
export function withHeartbeat(url: string): string {
  const parsed = new URL(url);
  if (!parsed.searchParams.has('heartbeat')) parsed.searchParams.set('heartbeat', '10');
  return parsed.toString();
}
