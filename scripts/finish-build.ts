// Run after `tsc -p tsconfig.build.json` in a publishable package (its folder is the working directory):
// 1. tsc rewrites `./x.ts` to `./x.js` in emitted JavaScript but not in declarations (microsoft/TypeScript#61037);
//    a `.ts` specifier in a published `.d.ts` confuses tools other than tsc, so declarations get `.js` too.
// 2. Files the sources read at run time beside themselves (the demo's SQL migrations) are copied into dist.
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
console.log(`finish-build: ${declarations} declaration files given .js specifiers, ${assets} assets copied`);
