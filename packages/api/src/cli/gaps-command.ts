import { backfillGaps, reportGaps } from '@postbox/engine/control';
import { nonNegativeOption, operatorCommand, operatorUrl, withDatabase } from './operator-command.ts';

const HELP = `postbox gaps — version gaps: aggregates whose later versions are parked, waiting for a missing one

usage: postbox gaps [--consumer NAME] [--older-than MS] [--limit N] [--backfill]

Lists gaps open longer than --older-than (default 60000 ms). --backfill re-publishes the missing versions from
the outbox (their rows go back to pending; the consumer's inbox absorbs any it had after all). A gap of a blocked
aggregate is a failure: see \`postbox failures blocked\` and replay it instead.`;

export const gapsCommand = operatorCommand({
  name: 'gaps',
  help: HELP,
  options: {
    consumer: { type: 'string' },
    'older-than': { type: 'string' },
    limit: { type: 'string' },
    backfill: { type: 'boolean' },
  },
  verb: 'none',
  usageErrors: 'throw',
  async run({ values }) {
    const olderThanMs = nonNegativeOption(values['older-than'], 60_000, 'older-than');
    const limit = nonNegativeOption(values.limit, 100, 'limit');
    return withDatabase({ command: 'gaps', url: await operatorUrl(), max: 2 }, async (sql) => {
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
    });
  },
});
