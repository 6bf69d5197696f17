import { parseArgs } from 'node:util';
import {
  applyRoles,
  connect,
  DATABASE_ROLES,
  migrate,
  readRoleGrants,
  ROLE_FUNCTIONS,
  ROLE_PURPOSE,
  ROLE_SEQUENCES,
  type Sql,
} from '@postbox/engine';
import { stackEnv } from '@postbox/stack';

const HELP = `postbox migrate — apply the forward-only migrations in migrations/ (safe to run from many processes at once)

The demo's tables are not part of it: postbox start (and postbox consume of the demo consumer) apply those.

Uses DATABASE_URL (default: the local stack's PostgreSQL), as the role that owns Postbox's tables.
Options:
  --roles      then create the roles postbox_producer, postbox_relay, postbox_consumer, postbox_api and
               postbox_operator (NOLOGIN) and set each one's grants to exactly the least each needs (idempotent:
               privileges on Postbox's tables are revoked and granted again). Make your login roles members, e.g.
               CREATE ROLE relay_svc LOGIN PASSWORD '…' IN ROLE postbox_relay, and give each command its URL:
               DATABASE_URL_RELAY, DATABASE_URL_CONSUMER, DATABASE_URL_API, DATABASE_URL_OPERATOR
  --print      print the grants matrix (role × table × privilege) as the database enforces it
  -h, --help   this text`;

export async function migrateCommand(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      help: { type: 'boolean', short: 'h' },
      roles: { type: 'boolean' },
      print: { type: 'boolean' },
    },
  });
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  const sql = connect({ url: stackEnv().DATABASE_URL, max: 1, applicationName: 'postbox-migrate' });
  try {
    await migrate(sql, { log: (line) => console.log(line) });
    if (values.roles) {
      const statements = await applyRoles(sql);
      console.log(`roles: ${DATABASE_ROLES.join(', ')} — ${statements.length} statements, grants as in the matrix`);
    }
    if (values.print) await printGrants(sql);
    return 0;
  } finally {
    await sql.end({ timeout: 5 });
  }
}

/** The matrix from the catalog: a row per table, a column per role (S select, s some columns, I, U, D). */
async function printGrants(sql: Sql): Promise<void> {
  const grants = await readRoleGrants(sql);
  const short = DATABASE_ROLES.map((r) => r.replace('postbox_', ''));
  const width = Math.max(...grants.map((g) => g.table.length), 5);
  console.log(`${'table'.padEnd(width)}  ${short.map((r) => r.padEnd(9)).join(' ')}`);
  for (const g of grants)
    console.log(`${g.table.padEnd(width)}  ${DATABASE_ROLES.map((r) => (g.privileges[r] || '-').padEnd(9)).join(' ')}`);
  console.log(
    'S select, s select of some columns, I insert, U update, D delete; partitions are reached through their table',
  );
  for (const role of DATABASE_ROLES) {
    const extra = [
      ...(ROLE_SEQUENCES[role] ?? []).map((s) => `USAGE ${s}`),
      ...(ROLE_FUNCTIONS[role] ?? []).map((f) => `EXECUTE ${f}`),
    ];
    console.log(`${role}: ${ROLE_PURPOSE[role]}${extra.length > 0 ? ` — also ${extra.join(', ')}` : ''}`);
  }
}
