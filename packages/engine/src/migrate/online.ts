import { createHash } from 'node:crypto';
import { PostboxError } from '../errors.ts';

/**
 * Online migrations: a file whose first line is `-- postbox:online` is applied a step at a time, each step in a
 * transaction of its own (or, marked `no-transaction`, in none: `CREATE INDEX CONCURRENTLY`, `VALIDATE
 * CONSTRAINT` while writes go on), each step recorded when done, so a long change holds no lock across steps and
 * a migrator stopped half-way resumes at the first step not done. Steps are marked by a line
 * `-- postbox:step <name> [no-transaction]`; a no-transaction step is one statement, and is re-run when the
 * migrator died after it and before its record (write it so that running it twice is harmless: IF NOT EXISTS).
 */
export interface MigrationStep {
  name: string;
  sql: string;
  /** False: sent alone, outside any transaction block. */
  transaction: boolean;
  checksum: string;
}

const ONLINE = /^--\s*postbox:online\s*$/;
const STEP = /^--\s*postbox:step\s+(\S+)(?:\s+(\S+))?\s*$/;
const STEP_NAME = /^[a-z0-9_]+$/;

/** The steps of an online migration file, or null for a regular file (applied whole, in one transaction). */
export function onlineSteps(fileName: string, text: string): MigrationStep[] | null {
  const lines = text.split('\n');
  const first = lines.findIndex((l) => l.trim() !== '');
  if (first < 0 || !ONLINE.test(lines[first]!.trim())) return null;
  const fail = (why: string) => {
    throw new PostboxError('migration_invalid', 'permanent', `online migration ${fileName}: ${why}`);
  };
  const steps: Array<{ name: string; transaction: boolean; body: string[] }> = [];
  for (let i = first + 1; i < lines.length; i++) {
    const line = lines[i]!;
    const marker = STEP.exec(line.trim());
    if (marker) {
      const [, name, flag] = marker;
      if (!STEP_NAME.test(name!)) fail(`line ${i + 1}: step name "${name}" must be lowercase letters, digits, _`);
      if (flag !== undefined && flag !== 'no-transaction') fail(`line ${i + 1}: unknown step flag "${flag}"`);
      if (steps.some((s) => s.name === name)) fail(`line ${i + 1}: step "${name}" appears twice`);
      steps.push({ name: name!, transaction: flag === undefined, body: [] });
      continue;
    }
    const current = steps.at(-1);
    if (current) current.body.push(line);
    else if (line.trim() !== '' && !line.trim().startsWith('--')) fail(`line ${i + 1}: SQL before the first step`);
  }
  if (steps.length === 0) fail('no steps (a line "-- postbox:step <name>" starts each)');
  return steps.map((s) => {
    const sql = s.body.join('\n').trim();
    if (sql === '') fail(`step "${s.name}" is empty`);
    return { name: s.name, sql, transaction: s.transaction, checksum: createHash('sha256').update(sql).digest('hex') };
  });
}
