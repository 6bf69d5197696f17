// `npm run release:version -- X.Y.Z`: one version for every workspace, internal dependencies pinned to it, the changelog's
// Unreleased entries moved under `## [X.Y.Z] - today`, and the lockfile updated. Then `npm run release`.
import { execFileSync } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { bumpManifest, releaseChangelog, SEMVER } from './release/checks.ts';
import { readManifest, ROOT, WORKSPACES, writeManifest } from './release/workspaces.ts';

const version = process.argv[2] ?? '';
if (!SEMVER.test(version)) {
  console.error(`usage: npm run release:version -- X.Y.Z (got "${version}")`);
  process.exit(2);
}
const manifests = await Promise.all(WORKSPACES.map(readManifest));
const internal = new Set(manifests.map((m) => m.name));
const changelogFile = path.join(ROOT, 'CHANGELOG.md');
const changelog = releaseChangelog(
  await readFile(changelogFile, 'utf8'),
  version,
  new Date().toISOString().slice(0, 10),
);
for (const [i, dir] of WORKSPACES.entries()) await writeManifest(dir, bumpManifest(manifests[i]!, version, internal));
await writeFile(changelogFile, changelog);
execFileSync('npm', ['install', '--package-lock-only', '--no-audit', '--no-fund'], { cwd: ROOT, stdio: 'inherit' });
console.log(`version ${version}: ${WORKSPACES.length} workspaces, CHANGELOG.md and package-lock.json updated`);
