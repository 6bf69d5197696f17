import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FailureStreak } from './failure-streak.ts';
import type { Logger } from './logger.ts';

function recorder(): { log: Logger; lines: string[] } {
  const lines: string[] = [];
  const log = {
    warn: (_f: unknown, msg: string) => lines.push(msg),
    info: (_f: unknown, msg: string) => lines.push(msg),
  } as unknown as Logger;
  return { log, lines };
}

test('failure streak: one line when it starts, one every N while it lasts, one when it ends', () => {
  const { log, lines } = recorder();
  const streak = new FailureStreak(log, 'demo', 10);
  for (let i = 0; i < 25; i++) streak.failed(new Error('down'));
  assert.equal(streak.count, 25);
  streak.succeeded();
  streak.succeeded();
  assert.deepEqual(lines, [
    'demo failed; retrying with backoff',
    'demo still failing',
    'demo still failing',
    'demo recovered',
  ]);
  streak.failed(new Error('again'));
  assert.equal(lines.at(-1), 'demo failed; retrying with backoff');
});
