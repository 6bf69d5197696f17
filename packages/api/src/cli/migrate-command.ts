import { parseArgs } from 'node:util';
import { connect, migrate } from '@postbox/engine';
import { stackEnv } from '@postbox/stack';

const HELP = `postbox migrate — apply the forward-only migrations in migrations/ (safe to run from many processes at once)

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
    const applied = await migrate(sql, { log: (line) => console.log(line) });
    console.log(applied.length === 0 ? 'schema is up to date' : `applied ${applied.length} migration(s)`);
    return 0;
  } finally {
    await sql.end({ timeout: 5 });
  }
}
