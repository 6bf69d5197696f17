import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { FAILPOINTS, parseFailpoint } from './failpoint.ts';

test('failpoint: name or name@n; a malformed pass count is refused with the list of names', () => {
  assert.deepEqual(parseFailpoint(''), { name: '', pass: 1 });
  assert.deepEqual(parseFailpoint('relay.after-publish-before-mark'), {
    name: 'relay.after-publish-before-mark',
    pass: 1,
  });
  assert.deepEqual(parseFailpoint('replay.mid-batch@7'), { name: 'replay.mid-batch', pass: 7 });
  assert.throws(() => parseFailpoint('replay.mid-batch@0'), /name>@<n> with n ≥ 1 \(one of: outbox\.after-commit/);
  assert.throws(() => parseFailpoint('replay.mid-batch@x'), /must be <name>/);
});

test('failpoint: the armed one kills the process with SIGKILL on its n-th pass; others and unset are inert', () => {
  const script = `import { failpoint } from ${JSON.stringify(new URL('./failpoint.ts', import.meta.url).href)};
    for (let i = 1; i <= 5; i++) { failpoint('outbox.after-commit'); process.stdout.write(i + ' '); }`;
  const run = (value: string | undefined) =>
    spawnSync(process.execPath, ['--input-type=module', '-e', script], {
      env: { ...process.env, POSTBOX_FAILPOINT: value ?? '' },
      encoding: 'utf8',
    });
  const third = run('outbox.after-commit@3');
  assert.equal(third.signal, 'SIGKILL');
  assert.equal(third.stdout, '1 2 ');
  assert.equal(run('outbox.after-commit').stdout, '');
  assert.equal(run('replay.mid-batch').stdout, '1 2 3 4 5 ');
  assert.equal(run(undefined).status, 0);
  assert.equal(FAILPOINTS.length, 9);
});
