import { connect } from '@postbox/engine';
import { BacklogMonitor } from '@postbox/engine/control';
import { KafkaOffsets } from '@postbox/engine/kafka';
import { BullmqRetryScheduler, redisProbe } from '@postbox/engine/bullmq';
import type { RetryScheduler } from '@postbox/engine/runtime';
import type { SagaOrchestrator } from '@postbox/engine/saga';
import type { PostboxConfig } from '../config/env.ts';
import type { ApiDeps } from './context.ts';

export interface ApiResources {
  deps: ApiDeps;
  close(): Promise<void>;
}

/**
 * The control plane's connections: a small PostgreSQL pool, a broker admin for offsets, a Redis connection for
 * readiness and one retry scheduler per consumer, made when first needed. `close` ends all of them.
 * `sagas`: the definitions saga actions are built from (see ApiDeps.sagas).
 */
export function createApiResources(config: PostboxConfig, options: { sagas?: SagaOrchestrator } = {}): ApiResources {
  const sql = connect({ url: config.databaseUrl, max: 4, applicationName: 'postbox-api' });
  const offsets = new KafkaOffsets(config.kafka);
  const redis = config.redisUrl ? redisProbe(config.redisUrl) : null;
  const schedulers = new Map<string, RetryScheduler>();
  const backlog = new BacklogMonitor({ sql, offsets, topics: config.topics.map((t) => t.topic) });
  const deps: ApiDeps = {
    sql,
    backlog,
    schedulerFor: (consumer) => {
      if (!config.redisUrl) return null;
      let s = schedulers.get(consumer);
      if (!s) schedulers.set(consumer, (s = new BullmqRetryScheduler({ redisUrl: config.redisUrl, consumer })));
      return s;
    },
    probes: {
      postgres: () => sql`SELECT 1`,
      kafka: () => offsets.ping(),
      ...(redis ? { redis: () => redis.ping() } : {}),
    },
    ...(options.sagas ? { sagas: options.sagas } : {}),
  };
  return {
    deps,
    async close() {
      await backlog.stop();
      await Promise.all([...schedulers.values()].map((s) => s.close()));
      await offsets.close();
      redis?.close();
      await sql.end({ timeout: 5 });
    },
  };
}
