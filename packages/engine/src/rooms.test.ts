import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const ENTRIES = '(entries)';

/**
 * The rooms of packages/engine/src, lowest first (the house style point 14, docs/architecture.md "Rooms"). A file may
 * import a room of a lower level; within one level the imports between rooms must not form a cycle, so the
 * picture can be drawn with every arrow pointing down. A room is a folder (or file) under src/, matched by the
 * longest prefix; the top-level entry files (index.ts, runtime.ts, kafka.ts, …) stand above everything.
 */
const LEVELS: readonly (readonly string[])[] = [
  // The ground: errors, the envelope, the ports, the database handle, the records every room passes around, the
  // failpoint hooks.
  ['errors.ts', 'envelope', 'ports', 'db', 'records', 'testing'],
  // Storage and its services: named statements, payload sealing, telemetry, the migration runner, and the SQL
  // client bindings (they implement the db port; a consumer's handler writes through them).
  ['queries', 'crypto', 'telemetry', 'migrate', 'adapters/sql'],
  // The protocol.
  ['outbox', 'relay', 'consumer', 'retry', 'saga', 'reconcile', 'retention', 'verify', 'control', 'failures'],
  // The broker and scheduler adapters.
  ['adapters'],
  // The package's entries.
  [ENTRIES],
];

const SRC = dirname(fileURLToPath(import.meta.url));

function roomOf(file: string): string | null {
  if (!file.includes('/') && file !== 'errors.ts') return ENTRIES;
  let best: string | null = null;
  for (const room of LEVELS.flat()) {
    const matches = room.endsWith('.ts') ? file === room : file.startsWith(`${room}/`);
    if (matches && (best === null || room.length > best.length)) best = room;
  }
  return best;
}

const levelOf = (room: string): number => LEVELS.findIndex((level) => level.includes(room));

interface Arrow {
  from: string;
  to: string;
  fromRoom: string;
  toRoom: string;
}

/** Every relative import (static, type-only, re-export, dynamic) of every non-test source file. */
function arrows(): { arrows: Arrow[]; homeless: string[] } {
  const files = readdirSync(SRC, { recursive: true, encoding: 'utf8' })
    .map((f) => f.split('\\').join('/'))
    .filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts') && !f.endsWith('.test-support.ts'));
  const found: Arrow[] = [];
  const homeless: string[] = [];
  for (const from of files) {
    const fromRoom = roomOf(from);
    if (fromRoom === null) {
      homeless.push(from);
      continue;
    }
    const { importedFiles } = ts.preProcessFile(readFileSync(join(SRC, from), 'utf8'), true, true);
    for (const { fileName } of importedFiles) {
      if (!fileName.startsWith('.')) continue;
      const to = relative(SRC, resolve(SRC, dirname(from), fileName))
        .split('\\')
        .join('/');
      const toRoom = roomOf(to);
      if (toRoom === null) homeless.push(to);
      else if (toRoom !== fromRoom) found.push({ from, to, fromRoom, toRoom });
    }
  }
  return { arrows: found, homeless };
}

/** Rooms of one level that reach each other through their imports (each cycle once, as a → b → … → a). */
function cycles(all: Arrow[]): string[] {
  const next = new Map<string, Set<string>>();
  for (const a of all) {
    if (levelOf(a.fromRoom) !== levelOf(a.toRoom)) continue;
    next.set(a.fromRoom, (next.get(a.fromRoom) ?? new Set()).add(a.toRoom));
  }
  const found = new Set<string>();
  const walk = (start: string, room: string, path: string[]): void => {
    for (const to of next.get(room) ?? []) {
      if (to === start) {
        const ring = [...path];
        const first = ring.indexOf([...ring].sort()[0]!);
        const rotated = [...ring.slice(first), ...ring.slice(0, first)];
        found.add([...rotated, rotated[0]].join(' → '));
      } else if (!path.includes(to)) walk(start, to, [...path, to]);
    }
  };
  for (const room of next.keys()) walk(room, room, [room]);
  return [...found].sort();
}

test('every source file lives in a room of the list', () => {
  assert.deepEqual([...new Set(arrows().homeless)].sort(), []);
});

test('no room imports a room above it', () => {
  const up = arrows()
    .arrows.filter((a) => levelOf(a.toRoom) > levelOf(a.fromRoom))
    .map((a) => `${a.from} → ${a.to}  (${a.fromRoom} reaches up to ${a.toRoom})`)
    .sort();
  assert.deepEqual(up, []);
});

test('the rooms of one level import each other one way only', () => {
  const found = cycles(arrows().arrows);
  const detail = found.map((ring) => {
    const rooms = ring.split(' → ');
    const through = arrows().arrows.filter((a) =>
      rooms.slice(0, -1).some((r, i) => a.fromRoom === r && a.toRoom === rooms[i + 1]),
    );
    return `${ring}: ${through.map((a) => `${a.from} → ${a.to}`).join(', ')}`;
  });
  assert.deepEqual(detail, []);
});
