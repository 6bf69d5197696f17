import { test } from 'node:test';
import assert from 'node:assert/strict';
import { onlineSteps } from './online.ts';

test('online migration: a regular file is not online; an online one splits at its step markers, flags read', () => {
  assert.equal(onlineSteps('0001_a.sql', 'CREATE TABLE a (id int);\n-- postbox:online\n'), null);
  const steps = onlineSteps(
    '0002_b.sql',
    '\n-- postbox:online\n-- why: a comment before the first step is fine\n\n-- postbox:step one\nSELECT 1;\nSELECT 2;\n-- postbox:step two no-transaction\nCREATE INDEX CONCURRENTLY x ON a (id);\n',
  );
  assert.deepEqual(
    steps?.map((s) => [s.name, s.transaction, s.sql]),
    [
      ['one', true, 'SELECT 1;\nSELECT 2;'],
      ['two', false, 'CREATE INDEX CONCURRENTLY x ON a (id);'],
    ],
  );
  assert.notEqual(steps?.[0]?.checksum, steps?.[1]?.checksum);
});

test('online migration: a step checksum covers its own text only (fixing a later step leaves earlier ones as applied)', () => {
  const a = onlineSteps(
    'x.sql',
    '-- postbox:online\n-- postbox:step one\nSELECT 1;\n-- postbox:step two\nSELECT 2;\n',
  )!;
  const b = onlineSteps(
    'x.sql',
    '-- postbox:online\n-- postbox:step one\nSELECT 1;\n-- postbox:step two\nSELECT 3;\n',
  )!;
  assert.equal(a[0]!.checksum, b[0]!.checksum);
  assert.notEqual(a[1]!.checksum, b[1]!.checksum);
});

test('online migration: malformed files are refused by file, line and reason', () => {
  const cases: Array<[string, RegExp]> = [
    ['-- postbox:online\n', /no steps/],
    ['-- postbox:online\nSELECT 1;\n-- postbox:step a\nSELECT 1;\n', /line 2: SQL before the first step/],
    ['-- postbox:online\n-- postbox:step Bad\nSELECT 1;\n', /line 2: step name "Bad"/],
    ['-- postbox:online\n-- postbox:step a later\nSELECT 1;\n', /unknown step flag "later"/],
    ['-- postbox:online\n-- postbox:step a\nSELECT 1;\n-- postbox:step a\nSELECT 2;\n', /step "a" appears twice/],
    ['-- postbox:online\n-- postbox:step a\n\n-- postbox:step b\nSELECT 1;\n', /step "a" is empty/],
  ];
  for (const [text, reason] of cases) {
    assert.throws(
      () => onlineSteps('0009_bad.sql', text),
      (e: Error) => {
        assert.match(e.message, /^online migration 0009_bad\.sql: /);
        assert.match(e.message, reason);
        return true;
      },
    );
  }
});
