// A node:test reporter that adds, after the spec reporter's output, where the suite's wall time went: each test
// file's wall time (its process from spawn to exit: start-up, hooks and tests) beside the time inside its
// top-level tests' own bodies, the slowest files first. npm test budgets 30 minutes; this is how to see what to trim.
import type { TestEvent } from 'node:test/reporters';
import { relative, resolve } from 'node:path';

interface FileTime {
  wallMs: number;
  bodiesMs: number;
  tests: number;
}

const SHOWN = 25;

export default async function* fileTimes(source: AsyncIterable<TestEvent>): AsyncGenerator<string> {
  const files = new Map<string, FileTime>();
  const entry = (file: string): FileTime => {
    let time = files.get(file);
    if (!time) files.set(file, (time = { wallMs: 0, bodiesMs: 0, tests: 0 }));
    return time;
  };
  for await (const event of source) {
    if ((event.type === 'test:pass' || event.type === 'test:fail') && event.data.nesting === 0 && event.data.file) {
      const time = entry(event.data.file);
      time.bodiesMs += event.data.details.duration_ms;
      time.tests += 1;
    } else if (event.type === 'test:complete' && event.data.file && isFileItself(event.data.name, event.data.file)) {
      // Run in a process of its own, each file is reported once more as a test named by its path.
      entry(event.data.file).wallMs = event.data.details.duration_ms;
    }
  }
  yield* table(files);
}

function isFileItself(name: string, file: string): boolean {
  return resolve(process.cwd(), name) === file;
}

function* table(files: Map<string, FileTime>): Generator<string> {
  const rows = [...files].sort((a, b) => b[1].wallMs - a[1].wallMs);
  const wall = rows.reduce((sum, [, t]) => sum + t.wallMs, 0);
  const bodies = rows.reduce((sum, [, t]) => sum + t.bodiesMs, 0);
  const s = (ms: number) => (ms / 1000).toFixed(1).padStart(7);
  yield `\nfile wall times: ${rows.length} files, ${s(wall).trim()} s in all, ${s(bodies).trim()} s inside tests, ` +
    `${s(wall - bodies).trim()} s outside them (start-up, hooks)\n`;
  yield `   wall s  tests s  outside s  tests  file\n`;
  for (const [file, t] of rows.slice(0, SHOWN)) {
    yield ` ${s(t.wallMs)}  ${s(t.bodiesMs)}  ${s(t.wallMs - t.bodiesMs).padStart(9)}  ${String(t.tests).padStart(5)}  ${relative(process.cwd(), file)}\n`;
  }
}
