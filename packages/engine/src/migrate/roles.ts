import type { Sql } from '../db/connect.ts';
import {
  DATABASE_ROLES,
  POSTBOX_TABLES,
  PRIVILEGE_NAMES,
  ROLE_FUNCTIONS,
  ROLE_GRANTS,
  ROLE_SEQUENCES,
  type DatabaseRole,
} from './role-grants.ts';

const quote = (name: string) => `"${name.replaceAll('"', '""')}"`;

/**
 * Creates the Postbox roles (NOLOGIN) and brings each one's grants to exactly ROLE_GRANTS (role-grants.ts): every
 * privilege on the Postbox tables, the matrix's sequences and functions revoked, then granted again, in one transaction — running it twice changes
 * nothing, and a grant removed from the matrix is removed from the database. Needs CREATEROLE and ownership of the
 * tables (the role that ran `postbox migrate`). Returns the statements it ran.
 */
export async function applyRoles(sql: Sql): Promise<string[]> {
  const statements: string[] = [];
  await sql.begin(async (tx) => {
    const run = async (statement: string) => {
      statements.push(statement);
      await tx.unsafe(statement);
    };
    const [db] = await tx<
      { name: string; schema: string }[]
    >`SELECT current_database() AS name, current_schema() AS schema`;
    const tables = POSTBOX_TABLES.map(quote).join(', ');
    // Every sequence and function any role may be granted: revoked from each role first, like the tables.
    const sequences = [...new Set(Object.values(ROLE_SEQUENCES).flat())].map(quote).join(', ');
    const functions = [...new Set(Object.values(ROLE_FUNCTIONS).flat())].join(', ');
    for (const role of DATABASE_ROLES) {
      const [exists] = await tx`SELECT 1 FROM pg_roles WHERE rolname = ${role}`;
      if (!exists) await run(`CREATE ROLE ${quote(role)} NOLOGIN`);
      await run(`GRANT CONNECT ON DATABASE ${quote(db!.name)} TO ${quote(role)}`);
      await run(`GRANT USAGE ON SCHEMA ${quote(db!.schema)} TO ${quote(role)}`);
      await run(`REVOKE ALL ON ${tables} FROM ${quote(role)}`);
      await run(`REVOKE ALL ON SEQUENCE ${sequences} FROM ${quote(role)}`);
      await run(`REVOKE ALL ON FUNCTION ${functions} FROM ${quote(role)}`);
      for (const g of ROLE_GRANTS[role]) {
        const privileges = [...g.privileges].map((p) => PRIVILEGE_NAMES[p]!);
        const columns = g.columns ? ` (${g.columns.map(quote).join(', ')})` : '';
        await run(`GRANT ${privileges.map((p) => p + columns).join(', ')} ON ${quote(g.table)} TO ${quote(role)}`);
      }
      for (const seq of ROLE_SEQUENCES[role] ?? [])
        await run(`GRANT USAGE ON SEQUENCE ${quote(seq)} TO ${quote(role)}`);
      for (const fn of ROLE_FUNCTIONS[role] ?? []) await run(`GRANT EXECUTE ON FUNCTION ${fn} TO ${quote(role)}`);
    }
  });
  return statements;
}

/** One role's privileges on one table, as the catalog says: `SIUD` letters, `s` for a column grant only. */
export interface RoleTableGrant {
  table: string;
  privileges: Record<DatabaseRole, string>;
}

/**
 * The grants matrix read back from the catalog (has_table_privilege / has_any_column_privilege), not from the
 * matrix that made it: what `--print` shows is what the database enforces. Roles that do not exist read as ''.
 */
export async function readRoleGrants(sql: Sql): Promise<RoleTableGrant[]> {
  const rows = await sql<{ table_name: string; role: DatabaseRole; letters: string }[]>`
    SELECT t.name AS table_name, r.rolname AS role,
           CASE WHEN has_table_privilege(r.oid, t.name, 'SELECT') THEN 'S'
                WHEN has_any_column_privilege(r.oid, t.name, 'SELECT') THEN 's' ELSE '' END
        || CASE WHEN has_table_privilege(r.oid, t.name, 'INSERT') THEN 'I' ELSE '' END
        || CASE WHEN has_table_privilege(r.oid, t.name, 'UPDATE') THEN 'U' ELSE '' END
        || CASE WHEN has_table_privilege(r.oid, t.name, 'DELETE') THEN 'D' ELSE '' END AS letters
    FROM unnest(${POSTBOX_TABLES as unknown as string[]}::text[]) WITH ORDINALITY AS t(name, n)
    JOIN pg_roles r ON r.rolname = ANY(${DATABASE_ROLES as unknown as string[]}::text[])
    WHERE to_regclass(t.name) IS NOT NULL
    ORDER BY t.n`;
  const byTable = new Map<string, RoleTableGrant>();
  for (const r of rows) {
    const entry =
      byTable.get(r.table_name) ??
      ({ table: r.table_name, privileges: Object.fromEntries(DATABASE_ROLES.map((x) => [x, ''])) } as RoleTableGrant);
    entry.privileges[r.role] = r.letters;
    byTable.set(r.table_name, entry);
  }
  return [...byTable.values()];
}
