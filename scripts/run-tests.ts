// Runs every package's tests through Turborepo (one package at a time: they share the local stack), streams the
// output, and ends with one plain summary line summed over the packages' node:test reports.
import { spawn } from 'node:child_process';

const child = spawn(
  'npx',
  ['turbo', 'run', 'test', '--concurrency=1', '--log-order=stream', ...process.argv.slice(2)],
  {
    stdio: ['ignore', 'pipe', 'inherit'],
  },
);
const totals = { pass: 0, fail: 0, skipped: 0 };
let carry = '';
child.stdout.on('data', (chunk: Buffer) => {
  process.stdout.write(chunk);
  const lines = (carry + chunk.toString()).split('\n');
  carry = lines.pop() ?? '';
  for (const line of lines) {
    const m = /ℹ (pass|fail|skipped) (\d+)\s*$/.exec(line);
    if (m) totals[m[1] as keyof typeof totals] += Number(m[2]);
  }
});
child.on('exit', (code) => {
  console.log(`\ntests: ${totals.pass} passed, ${totals.fail} failed, ${totals.skipped} skipped`);
  process.exitCode = code ?? 1;
});
