import { fileURLToPath } from 'node:url';
import { migrate, type Sql } from '@postbox/engine';

/** The demo's own migration chain (its business tables), apart from the product's: scope `demo`. */
export const DEMO_MIGRATIONS = fileURLToPath(new URL('./migrations', import.meta.url));

export function migrateDemo(sql: Sql, log?: (line: string) => void): Promise<number[]> {
  return migrate(sql, { scope: 'demo', directory: DEMO_MIGRATIONS, ...(log ? { log } : {}) });
}
