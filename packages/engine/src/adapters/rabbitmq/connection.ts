import { readFileSync } from 'node:fs';
import { AMQPClient, type AMQPBaseClient, type AMQPChannel } from '@cloudamqp/amqp-client';
import { ConfigError } from '../../errors.ts';

/**
 * Connects to RabbitMQ with AMQP heartbeats on (see withHeartbeat). `amqps://` is TLS, verified against the
 * system's CAs or the CA file the URL names as `sslrootcert` (as PostgreSQL's and Redis' URLs do), host name
 * included.
 */
export function connectRabbit(url: string): Promise<AMQPBaseClient> {
  const { url: plain, ca } = rabbitTls(url);
  return new AMQPClient(withHeartbeat(plain), ca === undefined ? undefined : { ca }).connect();
}

/** The URL without `sslrootcert`, and the CA it names. */
export function rabbitTls(url: string): { url: string; ca?: string } {
  const parsed = new URL(url);
  const caFile = parsed.searchParams.get('sslrootcert');
  if (caFile === null) return { url };
  if (parsed.protocol !== 'amqps:') throw new ConfigError('RABBITMQ_URL names sslrootcert but is not amqps:// (TLS)');
  parsed.searchParams.delete('sslrootcert');
  try {
    return { url: parsed.toString(), ca: readFileSync(caFile, 'utf8') };
  } catch (cause) {
    throw new ConfigError(`RABBITMQ_URL's sslrootcert ${caFile} cannot be read`, { cause });
  }
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

/** How long a close waits for the broker's close-ok. */
const CLOSE_TIMEOUT_MS = 5000;

/**
 * Closes a channel, never waiting past the timeout: the client settles a close only on the broker's close-ok, and a
 * connection lost before it arrives leaves the close pending for ever (the channel is gone either way).
 */
export async function closeChannel(channel: AMQPChannel): Promise<void> {
  if (channel.closed) return;
  await withTimeout(channel.close().then(() => undefined));
}

/** Closes a connection the same way; one that does not answer in time has its socket destroyed. */
export async function closeConnection(connection: AMQPBaseClient): Promise<void> {
  if (connection.closed) return;
  const closed = await withTimeout(connection.close().then(() => undefined));
  if (!closed) (connection as AMQPBaseClient & { socket?: { destroy(): void } }).socket?.destroy();
}

/** Whether the promise settled within the timeout (its failure counts as settled: the thing is closed). */
function withTimeout(promise: Promise<void>): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), CLOSE_TIMEOUT_MS);
  });
  return Promise.race([
    promise.then(
      () => true,
      () => true,
    ),
    timeout,
  ]).finally(() => clearTimeout(timer));
}
