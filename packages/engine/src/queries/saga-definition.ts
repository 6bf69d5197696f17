import type { Queryable } from '../db/connect.ts';

export interface KnownDefinition {
  type: string;
  version: number;
  shapeHash: string;
  steps: string[];
}

/**
 * Records definitions (type, version, shape) unless known, and returns what is stored for each — the first shape
 * seen wins. Parameters: the definitions. Returns: the stored rows for them. Locks: the rows it inserts (two
 * processes registering at once: the second waits, then reads the first's).
 */
export async function registerDefinitions(sql: Queryable, defs: KnownDefinition[]): Promise<KnownDefinition[]> {
  if (defs.length === 0) return [];
  await sql`
    INSERT INTO saga_definition (saga_type, version, shape_hash, steps)
    SELECT t, v, h, string_to_array(s, ',')
    FROM unnest(${defs.map((d) => d.type)}::text[], ${defs.map((d) => d.version)}::int[],
                ${defs.map((d) => d.shapeHash)}::text[], ${defs.map((d) => d.steps.join(','))}::text[]) AS u(t, v, h, s)
    ON CONFLICT (saga_type, version) DO NOTHING`;
  const rows = await sql<Array<{ saga_type: string; version: number; shape_hash: string; steps: string[] }>>`
    SELECT saga_type, version, shape_hash, steps FROM saga_definition
    WHERE (saga_type, version) IN (SELECT * FROM unnest(${defs.map((d) => d.type)}::text[], ${defs.map((d) => d.version)}::int[]))`;
  return rows.map((r) => ({ type: r.saga_type, version: r.version, shapeHash: r.shape_hash, steps: r.steps }));
}

/**
 * (type, version) pairs of unfinished sagas (not completed, compensated or closed), with how many.
 * Parameters: none. Returns: the pairs. Locks: none.
 */
export async function unfinishedVersions(
  sql: Queryable,
): Promise<Array<{ type: string; version: number; count: number }>> {
  const rows = await sql<Array<{ saga_type: string; definition_version: number; n: string }>>`
    SELECT saga_type, definition_version, count(*)::text AS n FROM saga_instance
    WHERE status NOT IN ('completed', 'compensated', 'closed_manually')
    GROUP BY saga_type, definition_version`;
  return rows.map((r) => ({ type: r.saga_type, version: r.definition_version, count: Number(r.n) }));
}

/**
 * The step names a definition version was registered with (by any process), for naming the step of a saga this
 * process does not load. Parameters: type, version. Returns: the names, or undefined when never registered.
 * Locks: none.
 */
export async function definitionSteps(sql: Queryable, type: string, version: number): Promise<string[] | undefined> {
  const [row] = await sql<Array<{ steps: string[] }>>`
    SELECT steps FROM saga_definition WHERE saga_type = ${type} AND version = ${version}`;
  return row?.steps;
}
