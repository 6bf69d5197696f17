#!/usr/bin/env node
// The `postbox` command. An installed package runs its compiled CLI (dist/). A checkout of the repository ships
// no dist/ until it is built, and runs the TypeScript sources instead, exactly as `npm run postbox --` does: a
// child node with the source condition (CONTRIBUTING.md), which its worker threads inherit. The sources are
// present only in a checkout (the package's `files` leave them out), so they decide, not a stale build.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const sources = fileURLToPath(new URL('../src/bin/postbox.ts', import.meta.url));

if (!existsSync(sources)) {
  await import(new URL('../dist/bin/postbox.js', import.meta.url).href);
} else {
  const child = spawn(
    process.execPath,
    [
      '--conditions=@postbox/source',
      '--disable-warning=TimeoutNegativeWarning',
      ...process.execArgv,
      sources,
      ...process.argv.slice(2),
    ],
    { stdio: 'inherit' },
  );
  // Ctrl-C reaches the child from the terminal itself; a signal sent to this process alone is passed on.
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
    process.on(signal, () => {
      if (child.exitCode === null && child.signalCode === null && !fromTerminal(signal)) child.kill(signal);
    });
  }
  child.on('exit', (code, signal) => {
    if (signal) {
      process.removeAllListeners(signal);
      process.kill(process.pid, signal);
    }
    else process.exit(code ?? 1);
  });
}

/** SIGINT from a terminal's Ctrl-C went to the whole foreground group, the child included. */
function fromTerminal(signal) {
  return signal === 'SIGINT' && process.stdin.isTTY === true;
}
