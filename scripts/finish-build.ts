// Run after `tsc -p tsconfig.build.json` in a publishable package (its folder is the working directory):
// 1. tsc rewrites `./x.ts` to `./x.js` in emitted JavaScript but not in declarations (microsoft/TypeScript#61037);
//    a `.ts` specifier in a published `.d.ts` confuses tools other than tsc, so declarations get `.js` too.
// 2. Files the sources read at run time beside themselves (the demo's SQL migrations) are copied into dist.
// 3. `--copy <from>=<to>` copies a folder's SQL files the package ships from elsewhere in the repository (the
//    engine's build: the root `migrations/` into `dist/migrations/`).
import { copyFile, mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';

const RELATIVE_TS = /(['"])(\.\.?\/[^'"\n]*?)\.ts\1/g;
const ASSET = /\.sql$/;

async function* files(dir: string): AsyncGenerator<string> {
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) yield* files(full);
    else yield full;
  }
}

let declarations = 0;
for await (const file of files('dist')) {
  if (!file.endsWith('.d.ts')) continue;
  const text = await readFile(file, 'utf8');
  const fixed = text.replace(RELATIVE_TS, '$1$2.js$1');
  if (fixed !== text) {
    await writeFile(file, fixed);
    declarations++;
  }
}

let assets = 0;
for await (const file of files('src')) {
  if (!ASSET.test(file)) continue;
  const target = path.join('dist', path.relative('src', file));
  await mkdir(path.dirname(target), { recursive: true });
  await copyFile(file, target);
  assets++;
}
for (const [i, arg] of process.argv.entries()) {
  if (arg !== '--copy') continue;
  const [from, to] = (process.argv[i + 1] ?? '').split('=');
  if (!from || !to) throw new Error(`finish-build: --copy takes <from>=<to>, got ${process.argv[i + 1]}`);
  await mkdir(to, { recursive: true });
  for (const name of await readdir(from)) {
    if (!ASSET.test(name)) continue;
    await copyFile(path.join(from, name), path.join(to, name));
    assets++;
  }
}
console.log(`finish-build: ${declarations} declaration files given .js specifiers, ${assets} assets copied`);
