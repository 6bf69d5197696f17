// The service's own schema, kept beside Postbox's (run `postbox migrate` first): its own chain, scope `shop`.
import { fileURLToPath } from 'node:url';
import { connect, migrate } from '@postbox/engine';

const sql = connect({ url: process.env.DATABASE_URL!, max: 1 });
try {
  await migrate(sql, { scope: 'shop', directory: fileURLToPath(new URL('../src/migrations', import.meta.url)) });
} finally {
  await sql.end();
}
