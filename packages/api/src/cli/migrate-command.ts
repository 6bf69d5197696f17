import { parseArgs } from 'node:util';
import { connect, migrate } from '@postbox/engine';
import { stackEnv } from '@postbox/stack';

const HELP = `postbox migrate — apply the forward-only migrations in migrations/ (safe to run from many processes at once)

The demo's tables are not part of it: postbox start (and postbox consume of the demo consumer) apply those.

Uses DATABASE_URL (default: the local stack's PostgreSQL).
Options:
  -h, --help   this text`;

export async function migrateCommand(argv: string[]): Promise<number> {
  const { values } = parseArgs({ args: argv, options: { help: { type: 'boolean', short: 'h' } } });
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  const sql = connect({ url: stackEnv().DATABASE_URL, max: 1, applicationName: 'postbox-migrate' });
  try {
    await migrate(sql, { log: (line) => console.log(line) });
    return 0;
  } finally {
    await sql.end({ timeout: 5 });
  }
}
