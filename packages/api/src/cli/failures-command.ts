import { ConfigError, parsePayloadKeys, PayloadKeyError } from '@postbox/engine';
import {
  listBlocked,
  listFailures,
  openFailure,
  purgeFailurePayloads,
  readFailure,
  replayFailures,
  type FailureFilter,
} from '@postbox/engine/control';
import { BullmqRetryScheduler } from '@postbox/engine/bullmq';
import type { RetryScheduler } from '@postbox/engine/runtime';
import { linkEnv, REDIS_NEED, requireLink } from '../config/links.ts';
import {
  instantOption,
  integerOption,
  jsonOption,
  operatorCommand,
  operatorUrl,
  printJson,
  printTable,
  withDatabase,
} from './operator-command.ts';

const HELP = `postbox failures — find, inspect and replay failed events

  postbox failures list   [filters] [--limit N] [--before ID]
  postbox failures show   ID
  postbox failures blocked [--consumer NAME] [--limit N]   (aggregates whose later versions are parked, and why)
  postbox failures purge  [--older-than-days N]   (payload retention; default POSTBOX_FAILURE_RETENTION_DAYS, 30)
  postbox failures replay [filters | --id ID ...] --reason TEXT [--dry-run] [--limit N] [--rate R] [--actor NAME]
                          [--data JSON]    (replace the payload of one failure: a new event referencing the old)

filters: --consumer NAME  --code ERROR_CODE  --type EVENT_TYPE  --since ISO  --until ISO  --status open|replayed|skipped|expired
Replay goes through the consumer's own transaction by the retry ledger: a running \`postbox consume\` applies it.
--dry-run reports what each replay would do (apply, park behind a gap, be ignored) and changes nothing.
Every replay is written to the audit log with --actor (default: $USER) and --reason.`;

const OPTIONS = {
  consumer: { type: 'string' },
  code: { type: 'string' },
  type: { type: 'string' },
  since: { type: 'string' },
  until: { type: 'string' },
  status: { type: 'string' },
  id: { type: 'string', multiple: true },
  limit: { type: 'string' },
  before: { type: 'string' },
  reason: { type: 'string' },
  actor: { type: 'string' },
  rate: { type: 'string' },
  data: { type: 'string' },
  'dry-run': { type: 'boolean' },
  'older-than-days': { type: 'string' },
  json: { type: 'boolean' },
} as const;

export const failuresCommand = operatorCommand({
  name: 'failures',
  help: HELP,
  options: OPTIONS,
  verb: 'required',
  usageErrors: 'throw',
  async run({ values, verb, rest }) {
    const filter = filterOf(values);
    const env = await linkEnv();
    return withDatabase({ command: 'failures', url: await operatorUrl(env), max: 2 }, async (sql) => {
      if (verb === 'list') {
        const rows = await listFailures(
          sql,
          { status: 'open', ...filter },
          integerOption(values.limit, 'limit', { fallback: 50, max: 500 }),
          values.before ? integerOption(values.before, 'before') : null,
        );
        if (values.json) printJson(rows);
        else
          printTable(
            rows.map((r) => ({
              id: r.failure_id,
              consumer: r.consumer_name,
              code: r.error_code,
              type: r.event_type ?? '-',
              aggregate: `${r.aggregate_id ?? '-'}@${r.aggregate_version ?? '-'}`,
              attempts: r.attempts,
              last_failed: r.last_failed_at.toISOString(),
              status: r.status,
              detail: r.error_detail.slice(0, 60),
            })),
            { trimEnd: false },
          );
        if (rows.length > 0)
          console.log(`${rows.length} failure(s); next page: --before ${rows[rows.length - 1]!.failure_id}`);
        return 0;
      }
      if (verb === 'show') {
        const id = integerOption(rest[0], 'ID', { fallback: 0 });
        const f = await readFailure(sql, id);
        if (!f) {
          console.error(`no failure with id ${id}`);
          return 1;
        }
        const { payload: _payload, headers: _headers, envelope: _envelope, sealed, key_id, ...meta } = f;
        let content;
        try {
          content = openFailure(parsePayloadKeys(process.env.POSTBOX_PAYLOAD_KEYS), f);
        } catch (cause) {
          if (!(cause instanceof PayloadKeyError)) throw cause;
          printJson({ ...meta, encrypted_with: key_id, sealed_bytes: sealed?.length ?? null });
          console.error(`postbox failures show: ${cause.message}`);
          return 1;
        }
        const { payload, headers, envelope } = content;
        printJson({
          ...meta,
          encrypted_with: key_id,
          headers,
          envelope,
          payload_bytes: payload?.length ?? null,
          payload_utf8: payload ? printable(payload) : null,
        });
        return 0;
      }
      if (verb === 'replay') {
        if (!values.reason) {
          console.error('postbox failures replay: --reason is required (it goes to the audit log)');
          return 2;
        }
        const dryRun = values['dry-run'] ?? false;
        const schedulers = new Map<string, RetryScheduler>();
        const schedulerFor = (consumer: string) => {
          let s = schedulers.get(consumer);
          const redisUrl = requireLink(env, 'REDIS_URL', REDIS_NEED);
          if (!s) schedulers.set(consumer, (s = new BullmqRetryScheduler({ redisUrl, consumer })));
          return s;
        };
        try {
          const items = await replayFailures(
            sql,
            dryRun ? null : schedulerFor,
            {
              filter,
              limit: integerOption(values.limit, 'limit', { fallback: 50, max: 1000 }),
              dryRun,
              actor: values.actor ?? process.env.USER ?? 'operator',
              reason: values.reason,
              ratePerSecond: integerOption(values.rate, 'rate', { fallback: 20 }),
              ...(values.data === undefined ? {} : { editedData: jsonOption(values.data, 'data') }),
            },
            parsePayloadKeys(process.env.POSTBOX_PAYLOAD_KEYS),
          );
          printTable(
            items.map((i) => ({
              id: i.failureId,
              consumer: i.consumer,
              event: i.eventId ?? '-',
              aggregate: `${i.aggregateId ?? '-'}@${i.aggregateVersion ?? '-'}`,
              verdict: i.verdict,
              detail: i.detail,
            })),
            { trimEnd: false },
          );
          console.log(
            dryRun
              ? `dry run: ${items.length} failure(s) checked, nothing changed`
              : `${items.filter((i) => i.verdict === 'scheduled').length} replay(s) scheduled, audited`,
          );
        } finally {
          await Promise.all([...schedulers.values()].map((s) => s.close()));
        }
        return 0;
      }
      if (verb === 'purge') {
        const days = integerOption(values['older-than-days'], 'older-than-days', { fallback: retentionDays() });
        const cutoff = new Date(Date.now() - days * 86_400_000);
        let purged = 0;
        for (let n = -1; n !== 0; purged += n) n = await purgeFailurePayloads(sql, cutoff);
        console.log(
          `purged the payload of ${purged} failure(s) last seen before ${cutoff.toISOString()} (${days} days)`,
        );
        return 0;
      }
      if (verb === 'blocked') {
        const rows = await listBlocked(
          sql,
          values.consumer ?? null,
          integerOption(values.limit, 'limit', { fallback: 50, max: 500 }),
        );
        if (values.json) printJson(rows);
        else
          printTable(
            rows.map((b) => ({
              consumer: b.consumer_name,
              aggregate: b.aggregate_id,
              head: `${b.event_id ?? '-'}@${b.aggregate_version ?? '-'}`,
              reason: b.reason,
              parked: b.parked,
              since: b.blocked_at.toISOString(),
              detail: (b.detail ?? '').slice(0, 60),
            })),
            { trimEnd: false },
          );
        return 0;
      }
      console.error(`postbox failures: unknown verb "${verb}"\n\n${HELP}`);
      return 2;
    });
  },
});

/** How long failure payloads are kept: POSTBOX_FAILURE_RETENTION_DAYS, default 30. */
export function retentionDays(env: NodeJS.ProcessEnv = process.env): number {
  const raw = env.POSTBOX_FAILURE_RETENTION_DAYS;
  if (raw === undefined || raw === '') return 30;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1)
    throw new ConfigError(`POSTBOX_FAILURE_RETENTION_DAYS must be an integer ≥ 1, got "${raw}"`);
  return n;
}

function filterOf(v: Record<string, unknown>): FailureFilter {
  const f: FailureFilter = {};
  if (typeof v.consumer === 'string') f.consumer = v.consumer;
  if (typeof v.code === 'string') f.errorCode = v.code;
  if (typeof v.type === 'string') f.eventType = v.type;
  if (typeof v.status === 'string') {
    if (!['open', 'replayed', 'skipped', 'expired'].includes(v.status))
      throw new ConfigError(`--status must be open, replayed, skipped or expired, got "${v.status}"`);
    f.status = v.status as FailureFilter['status'];
  }
  for (const k of ['since', 'until'] as const) {
    if (typeof v[k] === 'string') {
      f[k] = instantOption(v[k] as string, k);
    }
  }
  if (Array.isArray(v.id)) f.ids = v.id.map((x) => integerOption(String(x), 'id'));
  return f;
}

function printable(bytes: Buffer): string {
  const text = bytes.toString('utf8');
  return text.includes('\ufffd') ? `base64:${bytes.toString('base64')}` : text;
}
