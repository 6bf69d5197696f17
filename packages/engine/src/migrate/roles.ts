import type { Queryable, Sql } from '../db/connect.ts';
import { ConfigError } from '../errors.ts';
import {
  DATABASE_ROLES,
  FORBIDDEN_MEMBERSHIPS,
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
 * tables (the role that ran `postbox migrate`). A Postbox role that already exists is checked first: one with
 * powers past its grants (SUPERUSER, BYPASSRLS, CREATEROLE, CREATEDB, REPLICATION, owning the tables; membership, direct or
 * not, of the tables' owner, of a role with such an attribute, or of a predefined all-data
 * role) is refused with a ConfigError that names it, and nothing is changed. Returns the statements it ran.
 */
export async function applyRoles(sql: Sql): Promise<string[]> {
  const statements: string[] = [];
  await sql.begin(async (tx) => {
    const run = async (statement: string) => {
      statements.push(statement);
      await tx.unsafe(statement);
    };
    await refuseOverpoweredRoles(tx);
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

/**
 * Refuses to reuse a Postbox role that can do more than its grants: applying the matrix to it would look like
 * least privilege and be none. Throws: ConfigError naming each role and each power, and the statement that drops it.
 * Locks: none.
 */
async function refuseOverpoweredRoles(sql: Queryable): Promise<void> {
  const rows = await sql<
    { role: string; attributes: string[]; owns: boolean; memberships: Array<{ through: string; power: string }> }[]
  >`
    WITH owner AS (SELECT c.relowner AS oid FROM pg_class c WHERE c.oid = to_regclass('message_outbox'))
    SELECT r.rolname AS role,
           array_remove(ARRAY[CASE WHEN r.rolsuper THEN 'SUPERUSER' END, CASE WHEN r.rolbypassrls THEN 'BYPASSRLS' END,
                              CASE WHEN r.rolcreaterole THEN 'CREATEROLE' END, CASE WHEN r.rolcreatedb THEN 'CREATEDB' END,
                              CASE WHEN r.rolreplication THEN 'REPLICATION' END], NULL) AS attributes,
           coalesce(r.oid = (SELECT oid FROM owner), false) AS owns,
           coalesce((SELECT json_agg(DISTINCT jsonb_build_object('through', d.rolname, 'power', m.rolname))
                     FROM pg_auth_members am
                     JOIN pg_roles d ON d.oid = am.roleid
                     JOIN pg_roles m ON pg_has_role(d.oid, m.oid, 'MEMBER')
                     WHERE am.member = r.oid
                       AND (m.rolname = ANY(${FORBIDDEN_MEMBERSHIPS as unknown as string[]}::text[])
                            OR m.rolsuper OR m.rolbypassrls OR m.rolcreaterole OR m.rolcreatedb OR m.rolreplication
                            OR m.oid = (SELECT oid FROM owner))), '[]') AS memberships
    FROM pg_roles r
    WHERE r.rolname = ANY(${DATABASE_ROLES as unknown as string[]}::text[])`;
  const problems = rows
    .map((r) => ({
      role: r.role,
      powers: [
        ...r.attributes.map((a) => ({ what: a, fix: `ALTER ROLE ${quote(r.role)} NO${a}` })),
        ...(r.owns
          ? [{ what: "owner of Postbox's tables", fix: `give the tables to another role (ALTER TABLE … OWNER TO …)` }]
          : []),
        ...r.memberships.map((m) => ({
          what: m.through === m.power ? `member of ${m.power}` : `member of ${m.power} through ${m.through}`,
          fix: `REVOKE ${quote(m.through)} FROM ${quote(r.role)}`,
        })),
      ],
    }))
    .filter((r) => r.powers.length > 0);
  if (problems.length === 0) return;
  const fixes = [...new Set(problems.flatMap(({ powers }) => powers.map((p) => p.fix)))];
  throw new ConfigError(
    `postbox migrate --roles will not reuse roles with powers past their grants: ${problems
      .map(({ role, powers }) => `${role} (${powers.map((p) => p.what).join(', ')})`)
      .join('; ')}. Remove them (${fixes.join('; ')}) or drop the role, then run it again`,
  );
}
