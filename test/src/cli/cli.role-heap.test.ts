import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { spawnPostbox, waitFor } from '../support/processes.ts';
import { stack } from '../support/stack.ts';

// `postbox relay` and `postbox consume` bound their main thread's heap by default: V8 takes the bound only at
// start, so the command restarts itself in place (same pid) with it. What the process runs with is read from
// the kernel (/proc/<pid>/cmdline), after the role has started.
let db: TestDatabase;
const topic = uniqueTopic('roleheap');

before(async () => {
  db = await freshDatabase();
  await createTopic(topic, 1);
});

after(async () => {
  await db.drop();
});

async function relayArgs(env: Record<string, string>): Promise<string[]> {
  const relay = spawnPostbox(['relay'], {
    ...stack,
    DATABASE_URL: db.url,
    POSTBOX_TOPICS: `${topic}:1`,
    POSTBOX_RELAY_THREADS: '0',
    LOG_LEVEL: 'info',
    ...env,
  });
  try {
    await waitFor('the relay to start', async () => relay.output().includes('relay started'), 30_000);
    const cmdline = await readFile(`/proc/${relay.child.pid}/cmdline`, 'utf8');
    return cmdline.split('\0').filter(Boolean);
  } finally {
    relay.kill('SIGTERM');
    await relay.exited;
  }
}

test('a relay runs with the default heap bound, in the process that was started', { timeout: 60_000 }, async () => {
  const args = await relayArgs({ NODE_OPTIONS: '' });
  assert.ok(args.includes('--max-old-space-size=256'), args.join(' '));
  assert.ok(args.includes('--max-semi-space-size=8'), args.join(' '));
  assert.equal(args.filter((a) => a === 'relay').length, 1, 'the command given once');
});

test('POSTBOX_HEAP_MB sets the bound; 0 leaves V8 its own', { timeout: 60_000 }, async () => {
  assert.ok((await relayArgs({ NODE_OPTIONS: '', POSTBOX_HEAP_MB: '512' })).includes('--max-old-space-size=512'));
  const v8s = await relayArgs({ NODE_OPTIONS: '', POSTBOX_HEAP_MB: '0' });
  assert.ok(!v8s.some((a) => a.startsWith('--max-')), v8s.join(' '));
});

test('heap flags the operator gave win: nothing is added', { timeout: 60_000 }, async () => {
  const args = await relayArgs({ NODE_OPTIONS: '--max-old-space-size=300' });
  assert.ok(!args.some((a) => a.startsWith('--max-')), args.join(' '));
});

test('a POSTBOX_HEAP_MB that is not a size is refused by name before anything starts', async () => {
  const relay = spawnPostbox(['relay'], { ...stack, DATABASE_URL: db.url, POSTBOX_HEAP_MB: '32' });
  assert.equal(await relay.exited, 1);
  assert.match(relay.output(), /POSTBOX_HEAP_MB must be 0 .* got "32" \[config_invalid\]/);
});
