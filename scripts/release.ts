// `npm run release`: checks a release before packing it, then packs it; it never publishes.
//   1. one version in every workspace, internal dependencies pinned to it (npm run release:version -- X.Y.Z sets both);
//   2. CHANGELOG.md has a dated section for that version with entries; each package's LICENSE is the root's;
//   3. build, typecheck, lint, then the whole test suite (which installs the packed packages into a new service
//      on the oldest supported Node and on this one);
//   4. npm pack of @postbox/engine, @postbox/workers and @postbox/api into release/X.Y.Z/, with tarballs.json.
// --skip-tests packs without step 3's suite, for trying the script: the tarballs are marked untested.
import { execFileSync } from 'node:child_process';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { changelogProblems, versionProblems } from './release/checks.ts';
import { PUBLISHED, readManifest, ROOT, WORKSPACES } from './release/workspaces.ts';

const { values } = parseArgs({ options: { 'skip-tests': { type: 'boolean' } } });
const tested = !values['skip-tests'];

const manifests = await Promise.all(WORKSPACES.map(readManifest));
const version = manifests[0]!.version;
const problems = [
  ...versionProblems(manifests),
  ...changelogProblems(await readFile(path.join(ROOT, 'CHANGELOG.md'), 'utf8'), version),
  ...(await licenseProblems()),
];
if (problems.length > 0) {
  console.error(`release ${version}: not ready\n${problems.map((p) => `  - ${p}`).join('\n')}`);
  process.exit(1);
}
const dirty = execFileSync('git', ['status', '--porcelain'], { cwd: ROOT, encoding: 'utf8' }).trim();
if (dirty) console.warn(`release ${version}: warning: the working tree has uncommitted changes`);

for (const script of ['build', 'typecheck', 'lint', ...(tested ? ['test'] : [])]) {
  console.log(`\nrelease ${version}: npm run ${script}`);
  execFileSync('npm', ['run', script], { cwd: ROOT, stdio: 'inherit' });
}

const destination = path.join(ROOT, 'release', version);
await mkdir(destination, { recursive: true });
const packOutput = execFileSync(
  'npm',
  ['pack', '--json', ...PUBLISHED.flatMap((p) => ['-w', p]), '--pack-destination', destination],
  { cwd: ROOT, encoding: 'utf8' },
);
// Lifecycle scripts may print before the JSON: it starts at the first '['.
const packed = JSON.parse(packOutput.slice(packOutput.indexOf('['))) as Array<{
  name: string;
  filename: string;
  size: number;
  unpackedSize: number;
  shasum: string;
  integrity: string;
}>;
const record = packed.map(({ name, filename, size, unpackedSize, shasum, integrity }) => ({
  name,
  filename,
  size,
  unpackedSize,
  shasum,
  integrity,
}));
await writeFile(
  path.join(destination, 'tarballs.json'),
  `${JSON.stringify({ version, tested, tarballs: record }, null, 2)}\n`,
);
console.log(
  `\nrelease ${version}: packed into ${path.relative(ROOT, destination)}/${tested ? '' : ' (UNTESTED: --skip-tests)'}`,
);
for (const t of record) console.log(`  ${t.filename}  ${t.size} bytes (${t.unpackedSize} unpacked)  sha1 ${t.shasum}`);
console.log(`to publish (not done here): npm publish ${path.relative(ROOT, destination)}/*.tgz --access public`);

async function licenseProblems(): Promise<string[]> {
  const root = await readFile(path.join(ROOT, 'LICENSE'), 'utf8');
  const problems: string[] = [];
  for (const dir of ['packages/engine', 'packages/workers', 'packages/api']) {
    const copy = await readFile(path.join(ROOT, dir, 'LICENSE'), 'utf8').catch(() => '');
    if (copy !== root) problems.push(`${dir}/LICENSE is not a copy of the root LICENSE`);
  }
  return problems;
}
