import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { createNetns, type Netns } from '../support/netns.ts';
import { freePort } from '@postbox/stack';

// The partition harness itself, before any scenario leans on it: a cut that silently did nothing would make every
// partition test pass. Each kind of cut is checked from inside the cut namespace, from a second namespace that
// must not be affected, and from the test process (root namespace), which must keep its own connections.

let netns: Netns;
let server: net.Server;
let port: number;
let other: number;
const others: net.Server[] = [];

function listen(host: string, p: number): Promise<net.Server> {
  return new Promise((resolve, reject) => {
    const s = net.createServer((c) => c.end());
    s.once('error', reject);
    s.listen(p, host, () => resolve(s));
  });
}

function connectFromRoot(host: string, p: number): Promise<string> {
  return new Promise((resolve) => {
    const s = net.connect({ host, port: p });
    s.setTimeout(2000, () => {
      s.destroy();
      resolve('timeout');
    });
    s.on('connect', () => {
      s.destroy();
      resolve('ok');
    });
    s.on('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
  });
}

before(async () => {
  netns = await createNetns(['a', 'b']);
  [port, other] = [await freePort(), await freePort()];
  server = await listen(netns.host, port);
  others.push(await listen(netns.host, other));
});

after(async () => {
  server?.close();
  for (const s of others) s.close();
  await netns?.destroy();
});

test('a namespace reaches the bridge address and nothing else: no route out, not even to loopback servers', async () => {
  assert.equal(await netns.probe('a', port), 'ok');
  assert.equal(await netns.probe('b', port), 'ok');
  // A server on the root namespace's loopback is not reachable from a role: every role must use the bridge.
  const loop = await listen('127.0.0.1', await freePort());
  others.push(loop);
  assert.equal(await netns.probe('a', (loop.address() as net.AddressInfo).port, 1000, '127.0.0.1'), 'refused');
  await assert.rejects(netns.probe('a', 53, 1000, '1.1.1.1'), /ENETUNREACH/);
});

test('drop: silent (connects time out) for that role and port only; heal restores it at once', async () => {
  await netns.cut('a', [port], 'drop');
  try {
    assert.equal(await netns.probe('a', port, 1500), 'timeout', await netns.describe('a'));
    assert.equal(await netns.probe('a', other), 'ok', 'another port of the same server stays reachable');
    assert.equal(await netns.probe('b', port), 'ok', 'another namespace is not cut');
    assert.equal(await connectFromRoot(netns.host, port), 'ok', 'the test process keeps its own connections');
  } finally {
    await netns.heal('a');
  }
  assert.equal(await netns.probe('a', port), 'ok');
});

test('reset: loud (refused at once)', async () => {
  await netns.cut('a', [port], 'reset');
  try {
    const started = Date.now();
    assert.equal(await netns.probe('a', port, 5000), 'refused', await netns.describe('a'));
    assert.ok(Date.now() - started < 4000, 'a reset answers at once, it does not wait for a timeout');
  } finally {
    await netns.heal('a');
  }
  assert.equal(await netns.probe('a', port), 'ok');
});

test("oneway: the server's answers are lost (the handshake never completes for the role)", async () => {
  await netns.cut('a', [port], 'oneway');
  try {
    assert.equal(await netns.probe('a', port, 1500), 'timeout', await netns.describe('a'));
    assert.equal(await netns.probe('b', port), 'ok');
  } finally {
    await netns.heal('a');
  }
  assert.equal(await netns.probe('a', port), 'ok');
});
