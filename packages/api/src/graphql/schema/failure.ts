import { GraphQLError } from 'graphql';
import { PayloadKeyError } from '@postbox/engine';
import {
  listBlocked,
  listFailures,
  openFailure,
  readFailure,
  type BlockedAggregate,
  type FailureFilter,
  type FailureSummary,
} from '@postbox/engine/control';
import { builder } from '../builder.ts';
import { keysetPage } from '../connection.ts';
import { decodeCursor, invalid, MAX_PAGE, pageSize, text, timeRange } from '../validate.ts';

const FailureStatusEnum = builder.enumType('FailureStatus', {
  values: ['open', 'replayed', 'skipped', 'expired'] as const,
});

export const FailureRef = builder.objectRef<FailureSummary>('Failure').implement({
  description: 'An event a consumer could not apply, kept with why (the payload needs the payload scope)',
  fields: (t) => ({
    id: t.exposeInt('failure_id'),
    consumer: t.exposeString('consumer_name'),
    eventId: t.string({ nullable: true, resolve: (f) => f.event_id }),
    eventType: t.string({ nullable: true, resolve: (f) => f.event_type }),
    aggregateId: t.string({ nullable: true, resolve: (f) => f.aggregate_id }),
    aggregateVersion: t.int({ nullable: true, resolve: (f) => f.aggregate_version }),
    topic: t.string({ nullable: true, resolve: (f) => f.topic }),
    partition: t.int({ nullable: true, resolve: (f) => f.broker_partition }),
    offset: t.string({ nullable: true, resolve: (f) => f.broker_offset }),
    errorCode: t.exposeString('error_code'),
    errorDetail: t.exposeString('error_detail'),
    attempts: t.exposeInt('attempts'),
    firstFailedAt: t.field({ type: 'DateTime', resolve: (f) => f.first_failed_at }),
    lastFailedAt: t.field({ type: 'DateTime', resolve: (f) => f.last_failed_at }),
    status: t.field({ type: FailureStatusEnum, resolve: (f) => f.status as 'open' }),
    encryptedWith: t.string({
      nullable: true,
      description: 'The key (POSTBOX_PAYLOAD_KEYS id) the payload is sealed with; null when stored in clear',
      resolve: (f) => f.key_id,
    }),
    payload: t.string({
      nullable: true,
      description:
        'The raw bytes as received, base64, decrypted when sealed (null after retention removed them); an error when the key is not in the ring',
      authScopes: { payload: true },
      resolve: async (f, _args, ctx) => {
        const row = await readFailure(ctx.deps.sql, f.failure_id);
        if (!row) return null;
        try {
          return openFailure(ctx.deps.payloadKeys, row).payload?.toString('base64') ?? null;
        } catch (cause) {
          // Not masked: the operator must learn which key the row needs, never see garbage.
          if (cause instanceof PayloadKeyError)
            throw new GraphQLError(cause.message, { extensions: { code: cause.code.toUpperCase() } });
          throw cause;
        }
      },
    }),
  }),
});

export const FailureFilterInput = builder.inputType('FailureFilter', {
  fields: (t) => ({
    consumer: t.string(),
    errorCode: t.string(),
    eventType: t.string(),
    status: t.field({ type: FailureStatusEnum, description: 'Default: open' }),
    since: t.field({ type: 'DateTime' }),
    until: t.field({ type: 'DateTime' }),
  }),
});

type FilterArg =
  | {
      consumer?: string | null;
      errorCode?: string | null;
      eventType?: string | null;
      status?: string | null;
      since?: Date | null;
      until?: Date | null;
    }
  | null
  | undefined;

/** A validated engine filter from the GraphQL input; hostile values are refused, not passed on. */
export function failureFilter(f: FilterArg, path = 'filter'): FailureFilter {
  const out: FailureFilter = {
    status: (f?.status ?? 'open') as FailureFilter['status'],
    ...timeRange(f?.since, f?.until),
  };
  const consumer = text(`${path}.consumer`, f?.consumer);
  const errorCode = text(`${path}.errorCode`, f?.errorCode);
  const eventType = text(`${path}.eventType`, f?.eventType);
  if (consumer !== undefined) out.consumer = consumer;
  if (errorCode !== undefined) out.errorCode = errorCode;
  if (eventType !== undefined) out.eventType = eventType;
  return out;
}

builder.queryField('failures', (t) =>
  t.connection({
    type: FailureRef,
    description: `Failures, newest first; pages of at most ${MAX_PAGE}, stable while new failures arrive`,
    authScopes: { viewer: true },
    args: { filter: t.arg({ type: FailureFilterInput }) },
    resolve: async (_root, args, ctx) => {
      const size = pageSize(args);
      const after = decodeCursor('failure', args.after);
      const rows = await listFailures(ctx.deps.sql, failureFilter(args.filter), size + 1, after);
      return keysetPage(rows, size, after, 'failure', (r) => r.failure_id);
    },
  }),
);

const BlockReasonEnum = builder.enumType('BlockReason', { values: ['retrying', 'failed'] as const });

const BlockedAggregateRef = builder.objectRef<BlockedAggregate>('BlockedAggregate').implement({
  fields: (t) => ({
    consumer: t.exposeString('consumer_name'),
    aggregateId: t.exposeString('aggregate_id'),
    headEventId: t.string({ nullable: true, resolve: (b) => b.event_id }),
    headVersion: t.int({ nullable: true, resolve: (b) => b.aggregate_version }),
    reason: t.field({ type: BlockReasonEnum, resolve: (b) => b.reason }),
    detail: t.string({ nullable: true, resolve: (b) => b.detail }),
    blockedAt: t.field({ type: 'DateTime', resolve: (b) => b.blocked_at }),
    parked: t.exposeInt('parked', { description: 'Later versions waiting behind the head' }),
  }),
});

builder.queryField('blockedAggregates', (t) =>
  t.field({
    type: [BlockedAggregateRef],
    description: 'Aggregates a consumer cannot advance (oldest first), and why',
    authScopes: { viewer: true },
    args: { consumer: t.arg.string(), first: t.arg.int({ defaultValue: 50 }) },
    resolve: (_root, args, ctx) => {
      const first = args.first ?? 50;
      if (!Number.isInteger(first) || first < 1 || first > MAX_PAGE)
        throw invalid('first', `must be 1…${MAX_PAGE} (got ${first})`);
      return listBlocked(ctx.deps.sql, text('consumer', args.consumer) ?? null, first);
    },
  }),
);
