#!/usr/bin/env node
// The `postbox` command. An installed package runs its compiled CLI (dist/). A checkout of the repository ships
// no dist/ until it is built, and runs the TypeScript sources instead, exactly as `npm run postbox --` does: node
// with the source condition (CONTRIBUTING.md), which its worker threads inherit. The sources are present only in
// a checkout (the package's `files` leave them out), so they decide, not a stale build.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const sources = fileURLToPath(new URL('../src/bin/postbox.ts', import.meta.url));

if (!existsSync(sources)) {
  await import(new URL('../dist/bin/postbox.js', import.meta.url).href);
} else {
  const args = [
    '--conditions=@postbox/source',
    '--disable-warning=TimeoutNegativeWarning',
    ...process.execArgv,
    sources,
    ...process.argv.slice(2),
  ];
  if (typeof process.execve === 'function' && process.platform !== 'win32') {
    // This process becomes the command: one pid, every signal reaching it once, its exit code the command's.
    process.execve(process.execPath, [process.execPath, ...args], process.env);
  }
  // No execve (a platform without it): a child, signals sent to this process alone passed on.
  const child = spawn(process.execPath, args, { stdio: 'inherit' });
  child.on('error', (err) => {
    console.error(`postbox: could not run ${sources}: ${err.message}`);
    process.exit(1);
  });
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
    process.on(signal, () => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    });
  }
  child.on('exit', (code, signal) => {
    if (signal) {
      process.removeAllListeners(signal);
      process.kill(process.pid, signal);
    } else process.exit(code ?? 1);
  });
}
