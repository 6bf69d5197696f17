import type { Queue, Worker } from 'bullmq';
import type { Redis } from 'ioredis';

/** How long a close waits for BullMQ to finish connecting before it closes anyway. */
const SETTLE_MS = 2000;

/**
 * Closes a BullMQ queue or worker and then its (shared) ioredis connection, also when it is still connecting.
 * BullMQ starts connecting in the constructor; its close() removes every listener of its connection object, and
 * a connect still pending then fails ("Connection is closed", once we disconnect) and is emitted as an `error`
 * with no listener left, which kills the process when a stop signal comes during start-up. So the pending
 * connect is made to settle first, while the queue's own error listener is still there: a connection not ready
 * yet is cut, and the queue is awaited until ready or failed.
 */
export async function closeQuietly(unit: Queue | Worker, connection: Redis): Promise<void> {
  if (connection.status !== 'ready') connection.disconnect();
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    unit.waitUntilReady().catch(() => {}),
    new Promise((resolve) => (timer = setTimeout(resolve, SETTLE_MS))),
  ]);
  clearTimeout(timer);
  await unit.close().catch(() => {});
  connection.disconnect();
}
