// @postbox/engine/bullmq, for the roles that run durable retries: the BullMQ alarm clock and its Redis probe.
export { BullmqRetryScheduler, type BullmqRetrySchedulerOptions } from './adapters/bullmq/retry-scheduler.ts';
export { redisProbe, type RedisProbe } from './adapters/bullmq/redis-probe.ts';
