// The release checks: lockstep versions and a dated changelog section, on this repository and on broken copies.
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { test } from 'node:test';
import {
  bumpManifest,
  changelogProblems,
  changelogSection,
  releaseChangelog,
  versionProblems,
  type Manifest,
} from '../../../scripts/release/checks.ts';
import { readManifest, ROOT, WORKSPACES } from '../../../scripts/release/workspaces.ts';

test('this repository is in lockstep: one version, internal dependencies pinned to it, a changelog section for it', async () => {
  const manifests = await Promise.all(WORKSPACES.map(readManifest));
  assert.deepEqual(versionProblems(manifests), []);
  const changelog = await readFile(path.join(ROOT, 'CHANGELOG.md'), 'utf8');
  assert.deepEqual(changelogProblems(changelog, manifests[0]!.version), []);
});

test('a version out of step, a loose internal range, a missing or empty changelog section are each named', () => {
  const engine: Manifest = { name: '@postbox/engine', version: '0.2.0' };
  const workers: Manifest = {
    name: '@postbox/workers',
    version: '0.1.0',
    dependencies: { '@postbox/engine': '^0.2.0' },
  };
  assert.deepEqual(versionProblems([engine, workers]), [
    'workspaces disagree on the version: @postbox/engine@0.2.0, @postbox/workers@0.1.0',
    '@postbox/workers depends on @postbox/engine@^0.2.0, not exactly 0.1.0',
  ]);
  const text = '# Changelog\n\n## [Unreleased]\n\n### Added\n- a thing\n\n## [0.1.0] - 2026-12-04\n\n### Added\n';
  assert.match(changelogProblems(text, '0.2.0')[0]!, /no "## \[0.2.0\] - YYYY-MM-DD" section/);
  assert.deepEqual(changelogProblems(text, '0.1.0'), ["CHANGELOG.md's section 0.1.0 lists no change"]);
});

test('release:version moves the Unreleased entries under the new version and pins every internal dependency', () => {
  const text =
    '# Changelog\n\n## [Unreleased]\n\n### Added\n- a thing\n- another\n\n## [0.1.0] - 2026-12-04\n\n- first\n';
  const next = releaseChangelog(text, '0.2.0', '2026-12-06');
  assert.deepEqual(changelogSection(next, '0.2.0'), { date: '2026-12-06', entries: ['- a thing', '- another'] });
  assert.deepEqual(changelogSection(next, 'Unreleased')?.entries, []);
  assert.deepEqual(changelogProblems(next, '0.2.0'), []);
  assert.throws(() => releaseChangelog(next, '0.3.0', '2026-12-07'), /nothing under "## \[Unreleased\]"/);
  assert.throws(() => releaseChangelog(text, '0.1.0', '2026-12-07'), /already has a section 0.1.0/);

  const api: Manifest = {
    name: '@postbox/api',
    version: '0.1.0',
    dependencies: { '@postbox/engine': '0.1.0', graphql: '^16.15.0' },
    devDependencies: { '@postbox/stack': '0.1.0' },
  };
  const bumped = bumpManifest(api, '0.2.0', new Set(['@postbox/api', '@postbox/engine', '@postbox/stack']));
  assert.deepEqual(bumped, {
    name: '@postbox/api',
    version: '0.2.0',
    dependencies: { '@postbox/engine': '0.2.0', graphql: '^16.15.0' },
    devDependencies: { '@postbox/stack': '0.2.0' },
  });
});
