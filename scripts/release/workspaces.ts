import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { Manifest } from './checks.ts';

export const ROOT = path.resolve(import.meta.dirname, '../..');
/** Every workspace, versioned together. */
export const WORKSPACES = ['packages/engine', 'packages/workers', 'packages/api', 'packages/stack', 'bench', 'test'];
/** The packages a release packs. */
export const PUBLISHED = ['@postbox/engine', '@postbox/workers', '@postbox/api'];

export async function readManifest(dir: string): Promise<Manifest> {
  return JSON.parse(await readFile(path.join(ROOT, dir, 'package.json'), 'utf8')) as Manifest;
}

export async function writeManifest(dir: string, manifest: Manifest): Promise<void> {
  await writeFile(path.join(ROOT, dir, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
}
