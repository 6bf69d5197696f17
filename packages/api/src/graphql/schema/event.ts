import { eventStatus, type ConsumerEventStatus, type EventStatus, type OutboxEventRow } from '@postbox/engine/control';
import { builder } from '../builder.ts';
import { uuid } from '../validate.ts';

const ConsumerEventStateEnum = builder.enumType('ConsumerEventState', {
  values: ['pending', 'applied', 'duplicate', 'parked', 'retrying', 'failed', 'skipped'] as const,
});

const OutboxStatusEnum = builder.enumType('OutboxStatus', {
  values: ['pending', 'publishing', 'published', 'failed'] as const,
});

const OutboxStateRef = builder.objectRef<OutboxEventRow>('OutboxState').implement({
  fields: (t) => ({
    status: t.field({ type: OutboxStatusEnum, resolve: (o) => o.status }),
    topic: t.exposeString('topic'),
    attempts: t.exposeInt('attempts'),
    availableAt: t.field({ type: 'DateTime', resolve: (o) => o.available_at }),
    publishedAt: t.field({ type: 'DateTime', nullable: true, resolve: (o) => o.published_at }),
    partition: t.int({ nullable: true, resolve: (o) => o.broker_partition }),
    offset: t.string({ nullable: true, resolve: (o) => o.broker_offset }),
    lastError: t.string({ nullable: true, resolve: (o) => o.last_error }),
    createdAt: t.field({ type: 'DateTime', resolve: (o) => o.created_at }),
  }),
});

const ConsumerEventRef = builder.objectRef<ConsumerEventStatus>('ConsumerEventStatus').implement({
  fields: (t) => ({
    consumer: t.exposeString('consumer'),
    state: t.field({ type: ConsumerEventStateEnum, resolve: (c) => c.state }),
    processedAt: t.field({ type: 'DateTime', nullable: true, resolve: (c) => c.processedAt }),
    duplicateDeliveries: t.exposeInt('duplicateDeliveries'),
    retryAttempt: t.exposeInt('retryAttempt', { nullable: true }),
    nextRetryAt: t.field({ type: 'DateTime', nullable: true, resolve: (c) => c.nextRetryAt }),
    failureId: t.exposeInt('failureId', { nullable: true }),
    errorCode: t.exposeString('errorCode', { nullable: true }),
    aggregateVersionApplied: t.exposeInt('aggregateVersionApplied', { nullable: true }),
  }),
});

const EventRef = builder.objectRef<EventStatus>('Event').implement({
  fields: (t) => ({
    id: t.exposeID('eventId'),
    type: t.string({ nullable: true, resolve: (e) => e.outbox?.event_type ?? null }),
    aggregateId: t.string({ nullable: true, resolve: (e) => e.outbox?.aggregate_id ?? null }),
    aggregateVersion: t.int({ nullable: true, resolve: (e) => e.outbox?.aggregate_version ?? null }),
    occurredAt: t.field({ type: 'DateTime', nullable: true, resolve: (e) => e.outbox?.occurred_at ?? null }),
    outbox: t.field({
      type: OutboxStateRef,
      nullable: true,
      description: 'Null when the event did not go through this outbox',
      resolve: (e) => e.outbox,
    }),
    consumers: t.field({ type: [ConsumerEventRef], resolve: (e) => e.consumers }),
  }),
});

builder.queryField('event', (t) =>
  t.field({
    type: EventRef,
    nullable: true,
    description: 'One event: its outbox state, broker position, and what each consumer did with it',
    authScopes: { viewer: true },
    args: { id: t.arg.id({ required: true }) },
    resolve: (_root, args, ctx) => eventStatus(ctx.deps.sql, uuid('id', String(args.id))),
  }),
);
