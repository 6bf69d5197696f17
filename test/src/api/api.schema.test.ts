import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { printedSchema } from '@postbox/api';

const COMMITTED = new URL('../../../packages/api/src/graphql/schema.graphql', import.meta.url);

test('the committed SDL is the schema the code builds (npx postbox api --print-schema packages/api/src/graphql/schema.graphql)', async () => {
  assert.equal(await readFile(COMMITTED, 'utf8'), printedSchema());
});
