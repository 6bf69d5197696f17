import { redisConnection } from './redis-connection.ts';

/** A readiness probe of the retry schedule's Redis: one lazy connection that never queues commands offline. */
export interface RedisProbe {
  ping(): Promise<void>;
  close(): void;
}

export function redisProbe(url: string): RedisProbe {
  const redis = redisConnection(url, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 1 });
  redis.on('error', () => {}); // a failed ping answers the probe; the client's own error events add nothing
  return {
    async ping() {
      if (redis.status === 'wait') await redis.connect();
      await redis.ping();
    },
    close: () => redis.disconnect(),
  };
}
