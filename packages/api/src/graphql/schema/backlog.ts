import type { BacklogReport, ConsumerBacklog, PartitionBacklog, TopicBacklog } from '@postbox/engine/control';
import { sagaCounts, type SagaCounts } from '@postbox/engine/saga';
import { builder } from '../builder.ts';
import { invalid } from '../validate.ts';
import { SagaStatusEnum } from './saga.ts';

const TopicBacklogRef = builder.objectRef<TopicBacklog>('TopicBacklog').implement({
  fields: (t) => ({
    topic: t.exposeString('topic'),
    pending: t.exposeInt('pending', { description: 'Outbox rows waiting to be claimed' }),
    publishing: t.exposeInt('publishing', { description: 'Claimed by a relay, not yet confirmed' }),
    failed: t.exposeInt('failed', { description: 'Outbox rows the relay gave up on (last_error says why)' }),
    oldestPendingAgeMs: t.exposeInt('oldestPendingAgeMs', { nullable: true }),
  }),
});

const OutboxBacklogRef = builder.objectRef<BacklogReport['outbox']>('OutboxBacklog').implement({
  fields: (t) => ({
    pending: t.exposeInt('pending'),
    publishing: t.exposeInt('publishing'),
    failed: t.exposeInt('failed'),
    oldestPendingAgeMs: t.exposeInt('oldestPendingAgeMs', { nullable: true }),
    publishRate: t.exposeFloat('publishRate', {
      nullable: true,
      description: 'Records/s appended to the topics over the last minute',
    }),
    topics: t.field({ type: [TopicBacklogRef], resolve: (o) => o.topics }),
  }),
});

const PartitionLagRef = builder.objectRef<PartitionBacklog>('PartitionLag').implement({
  fields: (t) => ({
    topic: t.exposeString('topic'),
    partition: t.exposeInt('partition'),
    high: t.exposeString('high', { description: 'High watermark (next offset to be written)' }),
    committed: t.exposeString('committed', {
      nullable: true,
      description: "The group's committed offset (next to read)",
    }),
    lag: t.exposeInt('lag'),
  }),
});

const ConsumerBacklogRef = builder.objectRef<ConsumerBacklog>('ConsumerBacklog').implement({
  fields: (t) => ({
    consumer: t.exposeString('consumer'),
    groupId: t.exposeString('groupId', { nullable: true }),
    topics: t.exposeStringList('topics'),
    lag: t.exposeInt('lag', { description: 'Records on its topics not yet committed by the group' }),
    partitions: t.field({ type: [PartitionLagRef], resolve: (c) => c.partitions }),
    consumeRate: t.exposeFloat('consumeRate', {
      nullable: true,
      description: 'Committed records/s over the last minute',
    }),
    produceRate: t.exposeFloat('produceRate', { nullable: true, description: 'Records/s appended to its topics' }),
    retriesWaiting: t.exposeInt('retriesWaiting'),
    parked: t.exposeInt('parked', { description: 'Events waiting for an earlier version' }),
    blockedAggregates: t.exposeInt('blockedAggregates'),
    failures: t.exposeInt('failures', { description: 'Open failures in the failure store' }),
    drainSeconds: t.exposeFloat('drainSeconds', {
      nullable: true,
      description: 'lag ÷ (consumeRate − produceRate); null when not draining',
    }),
  }),
});

const StuckSagaRef = builder.objectRef<NonNullable<SagaCounts['oldestStuck']>>('StuckSaga').implement({
  fields: (t) => ({
    sagaId: t.exposeID('sagaId'),
    type: t.exposeString('type'),
    status: t.field({ type: SagaStatusEnum, resolve: (s) => s.status }),
    since: t.field({ type: 'DateTime', description: 'Its last transition', resolve: (s) => s.since }),
  }),
});

const SagaBacklogRef = builder.objectRef<SagaCounts>('SagaBacklog').implement({
  description: 'Sagas by status, and the ones that have waited longest',
  fields: (t) => ({
    running: t.int({ resolve: (c) => c.byStatus.running }),
    resolving: t.int({ resolve: (c) => c.byStatus.resolving }),
    compensating: t.int({ resolve: (c) => c.byStatus.compensating }),
    completed: t.int({ resolve: (c) => c.byStatus.completed }),
    compensated: t.int({ resolve: (c) => c.byStatus.compensated }),
    needsAttention: t.int({ resolve: (c) => c.byStatus.needs_attention }),
    closedManually: t.int({ resolve: (c) => c.byStatus.closed_manually }),
    oldestStuck: t.field({
      type: StuckSagaRef,
      nullable: true,
      description:
        'The unfinished saga (running, resolving, compensating, needs attention) with the oldest last transition',
      resolve: (c) => c.oldestStuck,
    }),
    oldestRunningSince: t.field({
      type: 'DateTime',
      nullable: true,
      description: 'When the oldest saga still running (not frozen, not ended) started',
      resolve: (c) => c.oldestRunningSince,
    }),
  }),
});

export const BacklogRef = builder.objectRef<BacklogReport>('Backlog').implement({
  fields: (t) => ({
    at: t.field({ type: 'DateTime', resolve: (b) => b.at }),
    outbox: t.field({ type: OutboxBacklogRef, resolve: (b) => b.outbox }),
    consumers: t.field({ type: [ConsumerBacklogRef], resolve: (b) => b.consumers }),
    sagas: t.field({
      type: SagaBacklogRef,
      description: 'Sagas by status and the oldest stuck (read when asked for)',
      resolve: (_b, _args, ctx) => sagaCounts(ctx.deps.sql),
    }),
    brokerError: t.exposeString('brokerError', {
      nullable: true,
      description: 'Why lag and rates are missing (broker unreachable)',
    }),
  }),
});

builder.queryField('backlog', (t) =>
  t.field({
    type: BacklogRef,
    description: 'Where the work is: outbox by state and topic, each consumer’s lag, rates and stuck counts',
    authScopes: { viewer: true },
    resolve: (_root, _args, ctx) => ctx.deps.backlog.report(),
  }),
);

builder.subscriptionField('backlog', (t) =>
  t.field({
    type: BacklogRef,
    description: 'The backlog every intervalMs (1000…60000), over server-sent events',
    authScopes: { viewer: true },
    args: { intervalMs: t.arg.int({ defaultValue: 5000 }) },
    subscribe: (_root, args, ctx) => {
      const intervalMs = args.intervalMs ?? 5000;
      if (!Number.isInteger(intervalMs) || intervalMs < 1000 || intervalMs > 60_000)
        throw invalid('intervalMs', `must be 1000…60000 (got ${intervalMs})`);
      return every(intervalMs, () => ctx.deps.backlog.report());
    },
    resolve: (report) => report,
  }),
);

/**
 * `next()` now, then every `intervalMs` after the previous one was delivered. `return` ends it at once, also while
 * it waits (a generator would finish its sleep and run one more report for a client that left).
 */
function every<T>(intervalMs: number, next: () => Promise<T>): AsyncIterableIterator<T> {
  let first = true;
  let done = false;
  let wake: (() => void) | null = null;
  let timer: NodeJS.Timeout | null = null;
  return {
    [Symbol.asyncIterator]() {
      return this;
    },
    async next(): Promise<IteratorResult<T>> {
      if (!first && !done)
        await new Promise<void>((resolve) => {
          wake = resolve;
          timer = setTimeout(resolve, intervalMs);
        });
      first = false;
      if (done) return { done: true, value: undefined };
      return { done: false, value: await next() };
    },
    async return(): Promise<IteratorResult<T>> {
      done = true;
      if (timer) clearTimeout(timer);
      wake?.();
      return { done: true, value: undefined };
    },
  };
}
