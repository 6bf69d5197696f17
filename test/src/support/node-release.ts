import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

/** The oldest Node Postbox supports: the floor of `engines.node` in @postbox/engine's manifest (">=22.15.0"). */
export async function oldestSupportedNode(): Promise<string> {
  const manifest = JSON.parse(await readFile(path.join(ROOT, 'packages/engine/package.json'), 'utf8')) as {
    engines: { node: string };
  };
  const floor = /^>=\s*(\d+\.\d+\.\d+)$/.exec(manifest.engines.node)?.[1];
  if (!floor) throw new Error(`engines.node of @postbox/engine is not ">=x.y.z": ${manifest.engines.node}`);
  return floor;
}

/**
 * The `node` binary of a release, from the npm registry's `node-<platform>-<arch>` package (the one the `node`
 * devDependency installs), kept under .postbox/node/<version> so it is fetched once per machine.
 */
export function nodeBinary(version: string, log: (line: string) => void): string {
  const prefix = path.join(ROOT, '.postbox/node', version);
  const binary = path.join(prefix, 'node_modules', `node-${process.platform}-${process.arch}`, 'bin', 'node');
  if (!existsSync(binary)) {
    log(`installing node ${version} into ${prefix}`);
    execFileSync(
      'npm',
      [
        'install',
        '--prefix',
        prefix,
        '--no-save',
        '--no-audit',
        '--no-fund',
        `node-${process.platform}-${process.arch}@${version}`,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'], timeout: 300_000 },
    );
  }
  const actual = execFileSync(binary, ['--version'], { encoding: 'utf8' }).trim();
  if (actual !== `v${version}`) throw new Error(`${binary} is ${actual}, not v${version}`);
  return binary;
}
