import { parseArgs } from 'node:util';
import { ConfigError, connect, parsePayloadKeys, PayloadKeyError } from '@postbox/engine';
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
import { databaseUrlFor } from '../config/env.ts';

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

export async function failuresCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      help: { type: 'boolean', short: 'h' },
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
    },
  });
  const [verb, ...rest] = positionals;
  if (values.help || !verb) {
    console.log(HELP);
    return values.help ? 0 : 2;
  }
  const filter = filterOf(values);
  const env = await linkEnv();
  const sql = connect({ url: databaseUrlFor('operator', env), max: 2, applicationName: 'postbox-failures' });
  try {
    if (verb === 'list') {
      const rows = await listFailures(
        sql,
        { status: 'open', ...filter },
        positiveInt(values.limit, 50, 'limit', 500),
        values.before ? positiveInt(values.before, 0, 'before') : null,
      );
      if (values.json) console.log(JSON.stringify(rows, null, 2));
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
        );
      if (rows.length > 0)
        console.log(`${rows.length} failure(s); next page: --before ${rows[rows.length - 1]!.failure_id}`);
      return 0;
    }
    if (verb === 'show') {
      const id = positiveInt(rest[0], 0, 'ID');
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
        console.log(JSON.stringify({ ...meta, encrypted_with: key_id, sealed_bytes: sealed?.length ?? null }, null, 2));
        console.error(`postbox failures show: ${cause.message}`);
        return 1;
      }
      const { payload, headers, envelope } = content;
      console.log(
        JSON.stringify(
          {
            ...meta,
            encrypted_with: key_id,
            headers,
            envelope,
            payload_bytes: payload?.length ?? null,
            payload_utf8: payload ? printable(payload) : null,
          },
          null,
          2,
        ),
      );
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
            limit: positiveInt(values.limit, 50, 'limit', 1000),
            dryRun,
            actor: values.actor ?? process.env.USER ?? 'operator',
            reason: values.reason,
            ratePerSecond: positiveInt(values.rate, 20, 'rate'),
            ...(values.data === undefined ? {} : { editedData: parseJson(values.data) }),
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
      const days = positiveInt(values['older-than-days'], retentionDays(), 'older-than-days');
      const cutoff = new Date(Date.now() - days * 86_400_000);
      let purged = 0;
      for (let n = -1; n !== 0; purged += n) n = await purgeFailurePayloads(sql, cutoff);
      console.log(`purged the payload of ${purged} failure(s) last seen before ${cutoff.toISOString()} (${days} days)`);
      return 0;
    }
    if (verb === 'blocked') {
      const rows = await listBlocked(sql, values.consumer ?? null, positiveInt(values.limit, 50, 'limit', 500));
      if (values.json) console.log(JSON.stringify(rows, null, 2));
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
        );
      return 0;
    }
    console.error(`postbox failures: unknown verb "${verb}"\n\n${HELP}`);
    return 2;
  } finally {
    await sql.end({ timeout: 5 });
  }
}

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
      const d = new Date(v[k] as string);
      if (Number.isNaN(d.getTime())) throw new ConfigError(`--${k} must be an ISO timestamp, got "${String(v[k])}"`);
      f[k] = d;
    }
  }
  if (Array.isArray(v.id)) f.ids = v.id.map((x) => positiveInt(String(x), 0, 'id'));
  return f;
}

function positiveInt(value: string | undefined, fallback: number, name: string, max = Number.MAX_SAFE_INTEGER): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > max)
    throw new ConfigError(`--${name} must be an integer from 1 to ${max}, got "${value}"`);
  return n;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (cause) {
    throw new ConfigError(`--data must be JSON: ${(cause as Error).message}`, { cause });
  }
}

function printable(bytes: Buffer): string {
  const text = bytes.toString('utf8');
  return text.includes('\ufffd') ? `base64:${bytes.toString('base64')}` : text;
}

function printTable(rows: Array<Record<string, unknown>>): void {
  if (rows.length === 0) {
    console.log('(none)');
    return;
  }
  const keys = Object.keys(rows[0]!);
  const widths = keys.map((k) => Math.max(k.length, ...rows.map((r) => String(r[k]).length)));
  console.log(keys.map((k, i) => k.padEnd(widths[i]!)).join('  '));
  for (const r of rows) console.log(keys.map((k, i) => String(r[k]).padEnd(widths[i]!)).join('  '));
}
