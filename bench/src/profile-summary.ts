// npm run profile-summary -- DIR [--top N]: the V8 CPU profiles under DIR (node --cpu-prof, one file per thread,
// e.g. from `npm run bench -- drain --cpu-prof DIR`), each summarised as busy/idle time and the functions with the
// most self time. Why a summary: a flame graph needs a browser; the top frames and the idle share are what say
// whether a role waits or works, and on what.
import { readdir, readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { parseArgs } from 'node:util';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}

interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

export interface FrameTime {
  frame: string;
  ms: number;
  share: number;
}

export interface ProfileSummary {
  totalMs: number;
  /** Self time of V8's (idle) node: the thread waited (for I/O, a timer, a message). */
  idleMs: number;
  /** Garbage collection and the program's own (non-JavaScript) work. */
  gcMs: number;
  top: FrameTime[];
}

/** Self time per function (name + file:line), from the samples and their time deltas. */
export function summarise(profile: CpuProfile, top = 15): ProfileSummary {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map<string, number>();
  let idle = 0;
  let gc = 0;
  let total = 0;
  profile.samples.forEach((id, i) => {
    const us = Math.max(0, profile.timeDeltas[i] ?? 0);
    total += us;
    const f = byId.get(id)?.callFrame;
    if (!f) return;
    if (f.functionName === '(idle)') idle += us;
    else if (f.functionName === '(garbage collector)' || f.functionName === '(program)') gc += us;
    const key = `${f.functionName || '(anonymous)'} ${shortUrl(f.url)}${f.url ? `:${f.lineNumber + 1}` : ''}`;
    self.set(key, (self.get(key) ?? 0) + us);
  });
  const busy = Math.max(1, total - idle);
  const frames = [...self.entries()]
    .filter(([k]) => !k.startsWith('(idle)'))
    .sort((a, b) => b[1] - a[1])
    .slice(0, top)
    .map(([frame, us]) => ({ frame, ms: us / 1000, share: us / busy }));
  return { totalMs: total / 1000, idleMs: idle / 1000, gcMs: gc / 1000, top: frames };
}

function shortUrl(url: string): string {
  const at = url.lastIndexOf('/node_modules/');
  if (at >= 0) return url.slice(at + '/node_modules/'.length);
  const src = url.indexOf('/src/');
  return src >= 0 ? url.slice(url.lastIndexOf('/', src - 1) + 1) : url.replace(/^node:/, 'node:');
}

async function profilesUnder(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await profilesUnder(path)));
    else if (entry.name.endsWith('.cpuprofile')) out.push(path);
  }
  return out.sort();
}

async function main(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { top: { type: 'string' } },
  });
  const dir = positionals[0];
  if (!dir) {
    process.stderr.write('usage: npm run profile-summary -- DIR [--top N]\n');
    return 2;
  }
  const top = Number(values.top ?? 15);
  const files = await profilesUnder(dir);
  if (files.length === 0) {
    process.stderr.write(`no .cpuprofile files under ${dir}\n`);
    return 1;
  }
  for (const file of files) {
    const s = summarise(JSON.parse(await readFile(file, 'utf8')) as CpuProfile, top);
    const busy = s.totalMs - s.idleMs;
    console.log(
      `\n${relative(dir, file)}: ${(s.totalMs / 1000).toFixed(1)} s sampled, busy ${(busy / 1000).toFixed(1)} s ` +
        `(${((100 * busy) / Math.max(1, s.totalMs)).toFixed(0)} %), GC + native ${(s.gcMs / 1000).toFixed(1)} s`,
    );
    for (const f of s.top)
      console.log(`  ${(100 * f.share).toFixed(1).padStart(5)} %  ${f.ms.toFixed(0).padStart(7)} ms  ${f.frame}`);
  }
  return 0;
}

if (import.meta.url === `file://${process.argv[1]}`) process.exitCode = await main(process.argv.slice(2));
