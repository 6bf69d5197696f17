import assert from 'node:assert/strict';
import { test } from 'node:test';
import { siblingModule } from './sibling-module.ts';

test('a .ts sibling stays .ts next to a source file', () => {
  assert.equal(siblingModule('./a.worker.ts', 'file:///p/src/x.ts').href, 'file:///p/src/a.worker.ts');
});

test('a .ts sibling becomes .js next to compiled JavaScript, the query kept', () => {
  const url = new URL('./h.ts', 'file:///p/dist/x.js');
  url.search = 'a=1';
  assert.equal(siblingModule('./h.ts', 'file:///p/dist/x.js').href, 'file:///p/dist/h.js');
  assert.equal(siblingModule(url.href, 'file:///p/dist/x.js').href, 'file:///p/dist/h.js?a=1');
});

test('other extensions and a base with a query are left alone', () => {
  assert.equal(siblingModule('./m.mjs', 'file:///p/dist/x.js').href, 'file:///p/dist/m.mjs');
  assert.equal(siblingModule('./h.ts', 'file:///p/dist/x.js?v=2').href, 'file:///p/dist/h.js');
});
