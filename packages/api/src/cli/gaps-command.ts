import { parseArgs } from 'node:util';
import { ConfigError, connect } from '@postbox/engine';
import { backfillGaps, reportGaps } from '@postbox/engine/control';
import { linkEnv } from '../config/links.ts';
import { databaseUrlFor } from '../config/env.ts';

const HELP = `postbox gaps — version gaps: aggregates whose later versions are parked, waiting for a missing one

usage: postbox gaps [--consumer NAME] [--older-than MS] [--limit N] [--backfill]

Lists gaps open longer than --older-than (default 60000 ms). --backfill re-publishes the missing versions from
the outbox (their rows go back to pending; the consumer's inbox absorbs any it had after all). A gap of a blocked
aggregate is a failure: see \`postbox failures blocked\` and replay it instead.`;

export async function gapsCommand(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      help: { type: 'boolean', short: 'h' },
      consumer: { type: 'string' },
      'older-than': { type: 'string' },
      limit: { type: 'string' },
      backfill: { type: 'boolean' },
    },
  });
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  const olderThanMs = nonNegative(values['older-than'], 60_000, 'older-than');
  const limit = nonNegative(values.limit, 100, 'limit');
  const sql = connect({ url: databaseUrlFor('operator', await linkEnv()), max: 2, applicationName: 'postbox-gaps' });
  try {
    const gaps = await reportGaps(sql, {
      olderThanMs,
      limit,
      ...(values.consumer ? { consumer: values.consumer } : {}),
    });
    if (gaps.length === 0) console.log('(no gaps)');
    for (const g of gaps)
      console.log(
        `${g.consumer_name}  ${g.aggregate_id}  waiting for v${g.expected_version}  parked v${g.parked_versions.join(',v')}${g.blocked ? '  (blocked: a failure)' : ''}`,
      );
    if (values.backfill) {
      for (const r of await backfillGaps(sql, gaps)) {
        console.log(
          `backfill ${r.consumer} ${r.aggregate_id}: re-published v${r.requeued.join(',v') || '-'}${r.missing.length ? `; not in the outbox: v${r.missing.join(',v')}` : ''}`,
        );
      }
    }
    return 0;
  } finally {
    await sql.end({ timeout: 5 });
  }
}

function nonNegative(value: string | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new ConfigError(`--${name} must be an integer ≥ 0, got "${value}"`);
  return n;
}
