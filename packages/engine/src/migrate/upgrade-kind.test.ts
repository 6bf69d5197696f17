import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readMigrations } from './runner.ts';
import { upgradeKind } from './upgrade-kind.ts';

test('every shipped migration is expand-only: each can be applied while the previous version still runs', async () => {
  for (const f of await readMigrations()) {
    const v = upgradeKind(f.version, f.text);
    assert.equal(v.kind, 'expand', `${f.version}_${f.name}: ${v.reasons.join('; ')}`);
  }
});

test('statements that break old code make a contract; additions, comments and function bodies do not', () => {
  const contract: Array<[string, RegExp]> = [
    ['ALTER TABLE message_outbox DROP COLUMN producer;', /drops/],
    ['ALTER TABLE message_inbox RENAME COLUMN processed_at TO taken_at;', /renames/],
    ['ALTER TABLE t ALTER COLUMN n TYPE bigint;', /type/],
    ['ALTER TABLE t ALTER COLUMN n SET NOT NULL;', /NOT NULL/],
    ['ALTER TABLE t ADD COLUMN tenant text NOT NULL;', /without a default/],
    ['ALTER TABLE t ALTER n TYPE bigint;', /type/],
    ['ALTER TABLE t ALTER COLUMN n SET DATA TYPE bigint;', /type/],
    ['ALTER TABLE t ALTER COLUMN n DROP DEFAULT;', /default/],
    ['ALTER TABLE t ADD COLUMN amount numeric(10, 2) NOT NULL;', /without a default/],
    ['ALTER TABLE t ADD amount numeric(10,2) NOT NULL, ADD COLUMN m text;', /without a default/],
    ["DO $$ BEGIN EXECUTE 'DROP TABLE t'; DROP VIEW v; END $$;", /drops/],
    ['REVOKE INSERT ON message_outbox FROM postbox_api;', /revokes/],
  ];
  for (const [sql, why] of contract) {
    const v = upgradeKind(99, sql);
    assert.equal(v.kind, 'contract', sql);
    assert.match(v.reasons.join('; '), why, sql);
  }
  const expand = [
    'CREATE TABLE t (id int NOT NULL PRIMARY KEY);',
    'ALTER TABLE t ADD COLUMN tenant text;',
    'ALTER TABLE t ADD COLUMN n int NOT NULL DEFAULT 0, ADD COLUMN m text;',
    'ALTER TABLE t ADD CONSTRAINT c CHECK (n IS NOT NULL) NOT VALID;',
    'ALTER TABLE t ADD COLUMN amount numeric(10, 2) NOT NULL DEFAULT 0, ADD COLUMN m text;',
    'ALTER TABLE t ALTER COLUMN n DROP NOT NULL;',
    "ALTER TYPE mood ADD VALUE 'meh';",
    '-- we DROP TABLE nothing here\nCREATE INDEX i ON t (n);',
    'CREATE FUNCTION f() RETURNS void LANGUAGE plpgsql AS $fn$ BEGIN DROP TABLE x; END $fn$;',
  ];
  for (const sql of expand) assert.equal(upgradeKind(99, sql).kind, 'expand', sql);
});

test('a file that says what it is wins, with its reason', () => {
  assert.deepEqual(upgradeKind(99, '-- postbox:contract old relays still read the column\nCREATE TABLE t (n int);'), {
    kind: 'contract',
    reasons: ['old relays still read the column'],
  });
  assert.equal(upgradeKind(99, '-- postbox:expand the view keeps the old name\nDROP VIEW v;').kind, 'expand');
});
