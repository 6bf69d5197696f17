import { ActionRefusedError, ConfigError, NotFoundError } from '@postbox/engine';
import {
  insertAudit,
  replayFailures,
  republish,
  retryNow,
  skipEvent,
  type ReplayItem,
  type RepublishResult,
  type RetryNowResult,
  type SkipResult,
} from '@postbox/engine/control';
import { builder } from '../builder.ts';
import type { ApiContext } from '../context.ts';
import { invalid, requiredText, text, uuid } from '../validate.ts';
import { MUTATION_ERRORS } from './errors.ts';
import { FailureFilterInput, failureFilter } from './failure.ts';

/**
 * An operator action: the engine writes the audit record of a success in its own transaction; an expected
 * refusal (not found, wrong state) is audited here, then returned as a typed error.
 */
export async function audited<T>(
  ctx: ApiContext,
  action: string,
  target: string,
  reason: string | null,
  run: () => Promise<T>,
): Promise<T> {
  try {
    return await run();
  } catch (error) {
    if (error instanceof NotFoundError || error instanceof ActionRefusedError || error instanceof ConfigError) {
      await insertAudit(ctx.deps.sql, {
        actor: ctx.caller.actor,
        action,
        reason,
        target,
        before: null,
        after: { code: error.code, message: error.message },
        outcome: 'refused',
      });
    }
    throw error;
  }
}

function schedulerOf(ctx: ApiContext, consumer: string) {
  const s = ctx.deps.schedulerFor(consumer);
  if (!s) throw new ConfigError('this needs the retry scheduler, and the control plane has no REDIS_URL');
  return s;
}

const ReplayVerdictEnum = builder.enumType('ReplayVerdict', {
  values: ['would_apply', 'would_park', 'would_ignore', 'not_replayable', 'scheduled'] as const,
});

const ReplayItemRef = builder.objectRef<ReplayItem>('ReplayItem').implement({
  fields: (t) => ({
    failureId: t.exposeInt('failureId'),
    consumer: t.exposeString('consumer'),
    eventId: t.exposeString('eventId', { nullable: true }),
    aggregateId: t.exposeString('aggregateId', { nullable: true }),
    aggregateVersion: t.exposeInt('aggregateVersion', { nullable: true }),
    verdict: t.field({ type: ReplayVerdictEnum, resolve: (i) => i.verdict }),
    detail: t.exposeString('detail'),
    replayEventId: t.string({ nullable: true, resolve: (i) => i.replayEventId ?? null }),
    dueAt: t.field({ type: 'DateTime', nullable: true, resolve: (i) => i.dueAt ?? null }),
  }),
});

const ReplayReportRef = builder.objectRef<{ dryRun: boolean; items: ReplayItem[] }>('ReplayReport').implement({
  fields: (t) => ({
    dryRun: t.exposeBoolean('dryRun'),
    scheduled: t.int({ resolve: (r) => r.items.filter((i) => i.verdict === 'scheduled').length }),
    items: t.field({ type: [ReplayItemRef], resolve: (r) => r.items }),
  }),
});

builder.mutationField('replayFailures', (t) =>
  t.field({
    type: ReplayReportRef,
    description:
      'Replays failures through the consumer’s own transaction (retry ledger). dryRun (the default) checks and changes nothing.',
    authScopes: { operator: true },
    errors: { types: MUTATION_ERRORS },
    args: {
      filter: t.arg({ type: FailureFilterInput }),
      ids: t.arg.intList(),
      limit: t.arg.int({ defaultValue: 50 }),
      dryRun: t.arg.boolean({ defaultValue: true }),
      reason: t.arg.string({ required: true }),
    },
    resolve: async (_root, args, ctx) => {
      const reason = requiredText('reason', args.reason);
      const limit = args.limit ?? 50;
      if (!Number.isInteger(limit) || limit < 1 || limit > 1000)
        throw invalid('limit', `must be 1…1000 (got ${limit})`);
      if (args.ids && (args.ids.length > 1000 || args.ids.some((id) => !Number.isInteger(id) || id < 1)))
        throw invalid('ids', 'must be at most 1000 positive failure ids');
      const filter = { ...failureFilter(args.filter), ...(args.ids ? { ids: args.ids } : {}) };
      const dryRun = args.dryRun ?? true;
      const target = args.ids ? `failures:${args.ids.join(',')}` : `failures:${JSON.stringify(filter)}`;
      return audited(ctx, 'failure.replay', target, reason, async () => {
        const items = await replayFailures(
          ctx.deps.sql,
          dryRun ? null : (c) => schedulerOf(ctx, c),
          {
            filter,
            limit,
            dryRun,
            actor: ctx.caller.actor,
            reason,
          },
          ctx.deps.payloadKeys,
        );
        if (dryRun) {
          await insertAudit(ctx.deps.sql, {
            actor: ctx.caller.actor,
            action: 'failure.replay.dry_run',
            reason,
            target,
            before: null,
            after: { checked: items.length, verdicts: count(items) },
          });
        }
        return { dryRun, items };
      });
    },
  }),
);

const RetryNowRef = builder.objectRef<RetryNowResult>('RetryScheduledNow').implement({
  fields: (t) => ({
    consumer: t.exposeString('consumer'),
    eventId: t.exposeString('eventId'),
    attempt: t.exposeInt('attempt'),
    dueAt: t.field({ type: 'DateTime', resolve: (r) => r.dueAt }),
    auditId: t.exposeInt('auditId'),
  }),
});

builder.mutationField('retryNow', (t) =>
  t.field({
    type: RetryNowRef,
    description: 'Brings a scheduled retry forward to now (same attempt count)',
    authScopes: { operator: true },
    errors: { types: MUTATION_ERRORS },
    args: { consumer: t.arg.string({ required: true }), eventId: t.arg.id({ required: true }), reason: t.arg.string() },
    resolve: (_root, args, ctx) => {
      const consumer = requiredText('consumer', args.consumer, 200);
      const eventId = uuid('eventId', String(args.eventId));
      const reason = text('reason', args.reason, 500) ?? null;
      return audited(ctx, 'retry.now', `consumer:${consumer}/event:${eventId}`, reason, () =>
        retryNow(ctx.deps.sql, (c) => schedulerOf(ctx, c), { consumer, eventId, actor: ctx.caller.actor, reason }),
      );
    },
  }),
);

const RepublishRef = builder.objectRef<RepublishResult>('Republished').implement({
  fields: (t) => ({
    aggregateId: t.exposeString('aggregateId'),
    requeuedVersions: t.intList({ resolve: (r) => r.requeued }),
    auditId: t.exposeInt('auditId'),
  }),
});

builder.mutationField('republish', (t) =>
  t.field({
    type: RepublishRef,
    description:
      'Back-fill: sends versions of an aggregate again from the outbox (same event ids; consumers absorb duplicates)',
    authScopes: { operator: true },
    errors: { types: MUTATION_ERRORS },
    args: {
      aggregateId: t.arg.string({ required: true }),
      fromVersion: t.arg.int({ required: true }),
      toVersion: t.arg.int(),
      reason: t.arg.string({ required: true }),
    },
    resolve: (_root, args, ctx) => {
      const aggregateId = requiredText('aggregateId', args.aggregateId, 500);
      const reason = requiredText('reason', args.reason);
      if (args.fromVersion < 1) throw invalid('fromVersion', `must be ≥ 1 (got ${args.fromVersion})`);
      if (args.toVersion != null && args.toVersion < args.fromVersion)
        throw invalid('toVersion', `must be ≥ fromVersion (got ${args.toVersion})`);
      return audited(ctx, 'outbox.republish', `aggregate:${aggregateId}`, reason, () =>
        republish(ctx.deps.sql, {
          aggregateId,
          fromVersion: args.fromVersion,
          ...(args.toVersion == null ? {} : { toVersion: args.toVersion }),
          actor: ctx.caller.actor,
          reason,
        }),
      );
    },
  }),
);

const SkipRef = builder.objectRef<SkipResult>('EventSkipped').implement({
  fields: (t) => ({
    consumer: t.exposeString('consumer'),
    eventId: t.exposeString('eventId'),
    aggregateId: t.exposeString('aggregateId'),
    skippedVersion: t.exposeInt('skippedVersion'),
    resumedEventId: t.exposeString('resumedEventId', {
      nullable: true,
      description: 'The parked successor now draining',
    }),
    auditId: t.exposeInt('auditId'),
  }),
});

builder.mutationField('skipEvent', (t) =>
  t.field({
    type: SkipRef,
    description: 'Explicit unblock: the consumer moves past a failed head event without its side effect (admin)',
    authScopes: { admin: true },
    errors: { types: MUTATION_ERRORS },
    args: {
      consumer: t.arg.string({ required: true }),
      eventId: t.arg.id({ required: true }),
      reason: t.arg.string({ required: true }),
    },
    resolve: (_root, args, ctx) => {
      const consumer = requiredText('consumer', args.consumer, 200);
      const eventId = uuid('eventId', String(args.eventId));
      const reason = requiredText('reason', args.reason);
      return audited(ctx, 'event.skip', `consumer:${consumer}/event:${eventId}`, reason, () =>
        skipEvent(
          ctx.deps.sql,
          ctx.deps.schedulerFor,
          {
            consumer,
            eventId,
            actor: ctx.caller.actor,
            reason,
          },
          ctx.deps.payloadKeys,
        ),
      );
    },
  }),
);

function count(items: ReplayItem[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const i of items) out[i.verdict] = (out[i.verdict] ?? 0) + 1;
  return out;
}
