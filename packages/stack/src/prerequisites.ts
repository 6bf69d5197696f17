import { constants } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { StackError } from './errors.ts';

/** The Debian package that provides each external program the stack needs. */
const INSTALL_HINTS = {
  java: 'apt-get install -y openjdk-17-jre-headless',
  mvn: 'apt-get install -y maven',
  'redis-server': 'apt-get install -y redis-server',
  'nats-server': 'apt-get install -y nats-server',
  openssl: 'apt-get install -y openssl',
} as const;

export type Prerequisite = keyof typeof INSTALL_HINTS;

/** The absolute path of `name` on PATH, or a StackError that says which package to install. */
export async function requireExecutable(name: Prerequisite): Promise<string> {
  const found = await findExecutable(name);
  if (found === undefined) {
    throw new StackError('prerequisite_missing', `${name} not found: ${INSTALL_HINTS[name]}`);
  }
  return found;
}

/** Like `requireExecutable` for several at once, so one run names everything that is missing. */
export async function requireExecutables(names: Prerequisite[]): Promise<void> {
  const missing: Prerequisite[] = [];
  for (const name of names) if ((await findExecutable(name)) === undefined) missing.push(name);
  if (missing.length > 0) {
    throw new StackError('prerequisite_missing', missing.map((n) => `${n} not found: ${INSTALL_HINTS[n]}`).join('\n'));
  }
}

export async function findExecutable(name: string): Promise<string | undefined> {
  for (const dir of (process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin').split(path.delimiter)) {
    if (dir === '') continue;
    const candidate = path.join(dir, name);
    try {
      await fs.access(candidate, constants.X_OK);
      return candidate;
    } catch {
      // Not in this directory.
    }
  }
  return undefined;
}
