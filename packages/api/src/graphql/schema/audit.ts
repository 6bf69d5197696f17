import { listAudit, type AuditRow } from '@postbox/engine/control';
import { builder } from '../builder.ts';
import { keysetPage } from '../connection.ts';
import { decodeCursor, MAX_PAGE, pageSize, text, timeRange } from '../validate.ts';

const AuditRecordRef = builder.objectRef<AuditRow>('AuditRecord').implement({
  description: 'One operator action (or a denied attempt): who, what, why, before and after',
  fields: (t) => ({
    id: t.exposeInt('audit_id'),
    actor: t.exposeString('actor'),
    action: t.exposeString('action'),
    reason: t.exposeString('reason', { nullable: true }),
    target: t.exposeString('target', { nullable: true }),
    before: t.field({ type: 'JSON', nullable: true, resolve: (a) => a.before }),
    after: t.field({ type: 'JSON', nullable: true, resolve: (a) => a.after }),
    outcome: t.exposeString('outcome', { description: 'ok, refused (an expected error) or denied (no scope)' }),
    at: t.field({ type: 'DateTime', resolve: (a) => a.at }),
  }),
});

const AuditFilterInput = builder.inputType('AuditFilter', {
  fields: (t) => ({
    actor: t.string(),
    action: t.string(),
    outcome: t.string(),
    since: t.field({ type: 'DateTime' }),
    until: t.field({ type: 'DateTime' }),
  }),
});

builder.queryField('auditLog', (t) =>
  t.connection({
    type: AuditRecordRef,
    description: `Operator actions, newest first; pages of at most ${MAX_PAGE}`,
    authScopes: { viewer: true },
    args: { filter: t.arg({ type: AuditFilterInput }) },
    resolve: async (_root, args, ctx) => {
      const size = pageSize(args);
      const after = decodeCursor('audit', args.after);
      const f = args.filter;
      const filter = {
        ...timeRange(f?.since, f?.until),
        ...optional('actor', text('filter.actor', f?.actor)),
        ...optional('action', text('filter.action', f?.action)),
        ...optional('outcome', text('filter.outcome', f?.outcome)),
      };
      const rows = await listAudit(ctx.deps.sql, filter, size + 1, after);
      return keysetPage(rows, size, after, 'audit', (r) => r.audit_id);
    },
  }),
);

function optional<K extends string>(key: K, value: string | undefined): Partial<Record<K, string>> {
  return value === undefined ? {} : ({ [key]: value } as Record<K, string>);
}
