import { connect, createWaker } from '@postbox/engine';
import { BacklogMonitor, BrokerHealthMonitor } from '@postbox/engine/control';
import { createBrokerOffsets } from '@postbox/workers';
import { BullmqRetryScheduler, redisProbe } from '@postbox/engine/bullmq';
import { type CheckName, Reconciler } from '@postbox/engine/reconcile';
import type { SagaOrchestrator } from '@postbox/engine/saga';
import type { PostboxConfig } from '../config/env.ts';
import type { ReconcileRegistrations } from '../reconcile/modules.ts';
import type { ApiDeps } from './context.ts';
import { SchedulerCache, type SchedulerCacheOptions } from './scheduler-cache.ts';

export interface ApiResources {
  deps: ApiDeps;
  close(): Promise<void>;
}

export interface ApiResourceOptions {
  /** The definitions saga actions are built from (see ApiDeps.sagas). @defaultValue none */
  sagas?: SagaOrchestrator;
  /** The sources of truth and participant records reconciliation checks. @defaultValue none */
  reconcile?: ReconcileRegistrations;
  /** Grace periods per check (POSTBOX_RECONCILE_GRACE_MS). @defaultValue the engine's */
  reconcileGraceMs?: Partial<Record<CheckName, number>>;
  /** The bound of open retry schedulers and their idle timeout (SchedulerCache). @defaultValue its defaults */
  schedulers?: Pick<SchedulerCacheOptions, 'maxOpen' | 'idleMs'>;
}

/**
 * The control plane's connections: a small PostgreSQL pool, a broker admin for offsets and replica health, a
 * Redis connection for readiness and the retry schedulers of consumers, opened when a call needs one and closed
 * when idle (a bounded SchedulerCache), and the reconciler over them. `close` ends all of them.
 */
export function createApiResources(config: PostboxConfig, options: ApiResourceOptions = {}): ApiResources {
  const sql = connect({ url: config.databaseUrl, max: 4, applicationName: 'postbox-api' });
  const offsets = createBrokerOffsets(config.broker, config.topics);
  const redis = config.redisUrl ? redisProbe(config.redisUrl) : null;
  const backlog = new BacklogMonitor({ sql, offsets, topics: config.topics.map((t) => t.topic) });
  const brokerHealth = new BrokerHealthMonitor({ offsets, topics: config.topics.map((t) => t.topic) });
  const redisUrl = config.redisUrl;
  const schedulers = new SchedulerCache({
    open: (consumer) => new BullmqRetryScheduler({ redisUrl: redisUrl!, consumer }),
    ...options.schedulers,
  });
  const schedulerFor = (consumer: string) => schedulers.get(consumer);
  const waker = createWaker(sql);
  const reconciler = new Reconciler({
    sql,
    sources: options.reconcile?.sources ?? [],
    participants: options.reconcile?.participants ?? [],
    ...(options.sagas ? { sagas: options.sagas } : {}),
    ...(redisUrl ? { schedulerFor } : {}),
    waker,
    options: { graceMs: options.reconcileGraceMs ?? {} },
  });
  const deps: ApiDeps = {
    sql,
    backlog,
    brokerHealth,
    schedulerFor: (consumer) => (redisUrl ? schedulerFor(consumer) : null),
    probes: {
      postgres: () => sql`SELECT 1`,
      kafka: () => offsets.ping(),
      ...(redis ? { redis: () => redis.ping() } : {}),
    },
    ...(options.sagas ? { sagas: options.sagas } : {}),
    reconciler,
    payloadKeys: config.payloadKeys,
  };
  return {
    deps,
    async close() {
      await backlog.stop();
      await brokerHealth.stop();
      await schedulers.close();
      await offsets.close();
      redis?.close();
      await waker.flush();
      await sql.end({ timeout: 5 });
    },
  };
}
