// @postbox/engine/bullmq, for the roles that run durable retries and scheduled reconciliation: the BullMQ alarm
// clock, its Redis probe, and the reconciliation schedule.
export { BullmqRetryScheduler, type BullmqRetrySchedulerOptions } from './adapters/bullmq/retry-scheduler.ts';
export { redisProbe, type RedisProbe } from './adapters/bullmq/redis-probe.ts';
export { redisConnection, redisTls } from './adapters/bullmq/redis-connection.ts';
export { ReconcileSchedule, type ReconcileScheduleOptions } from './adapters/bullmq/reconcile-schedule.ts';
