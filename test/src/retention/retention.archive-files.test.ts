import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { lstat, mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { resolveRetentionPolicy, runRetention } from '@postbox/engine/retention';
import { freshDatabase, type TestDatabase } from '../support/database.ts';

// Archives hold every event's data: they are created 0600 in 0700 folders, whatever the process' umask, and a
// temp file is opened exclusively without following a link — one planted at its path (a symlink to a file of
// someone else's choosing) stops the archive with an error naming it, and nothing is written through it.
let scratch: string;
const umask = process.umask(0o022); // the usual umask: it would leave files 0644 and folders 0755

before(async () => {
  scratch = await mkdtemp(join(tmpdir(), 'postbox-archive-files-'));
});

after(async () => {
  process.umask(umask);
  await rm(scratch, { recursive: true, force: true });
});

const mode = async (path: string) => ((await lstat(path)).mode & 0o777).toString(8);

/** A run 40 days ahead over a fresh database: its legacy partitions (no rows) are past the window, so archived. */
async function runOn(db: TestDatabase, archiveDir: string) {
  const now = new Date(Date.now() + 40 * 86_400_000);
  return runRetention(db.sql, { policy: resolveRetentionPolicy({ archiveDir }), trigger: 'cli', actor: 'test', now });
}

test('archives and manifests are 0600, the folders retention makes 0700', async () => {
  const db = await freshDatabase();
  try {
    const dir = join(scratch, 'private', 'archive');
    const report = await runOn(db, dir);
    assert.ok(
      report.partitions.some((p) => p.partition === 'message_outbox_p_legacy' && p.outcome === 'dropped'),
      JSON.stringify(report.partitions),
    );
    const folders = [join(scratch, 'private'), dir, join(dir, 'message_outbox'), join(dir, 'message_inbox')];
    assert.deepEqual(await Promise.all(folders.map(mode)), ['700', '700', '700', '700']);
    const files = await readdir(join(dir, 'message_outbox'));
    for (const name of ['message_outbox_p_legacy.csv.gz', 'message_outbox_p_legacy.manifest.json'])
      assert.ok(files.includes(name), `${name} in ${files.join(', ')}`);
    assert.deepEqual(
      files.filter((f) => f.endsWith('.tmp')),
      [],
    );
    for (const table of ['message_outbox', 'message_inbox'])
      for (const file of await readdir(join(dir, table)))
        assert.equal(await mode(join(dir, table, file)), '600', `${table}/${file}`);
  } finally {
    await db.drop();
  }
});

for (const suffix of ['.csv.gz.tmp', '.manifest.json.tmp']) {
  test(`a symlink planted at the temp path (${suffix}) stops the archive; the file it points to is untouched`, async () => {
    const db = await freshDatabase();
    try {
      const dir = join(scratch, `planted${suffix}`);
      const victim = join(scratch, `victim${suffix}`);
      await writeFile(victim, 'not an archive\n');
      await mkdir(join(dir, 'message_outbox'), { recursive: true, mode: 0o700 });
      const planted = join(dir, 'message_outbox', `message_outbox_p_legacy${suffix}`);
      await symlink(victim, planted);

      await assert.rejects(runOn(db, dir), (error: Error & { code?: string }) => {
        assert.equal(error.code, 'archive_unsafe_path', error.message);
        assert.match(error.message, /message_outbox_p_legacy.*\.tmp exists and is a symbolic link/);
        return true;
      });
      assert.equal(await readFile(victim, 'utf8'), 'not an archive\n', 'nothing written through the link');
      assert.ok((await lstat(planted)).isSymbolicLink(), 'the link is left for the operator to look at');
      const [row] = await db.sql<{ state: string; exists: boolean }[]>`
        SELECT state, to_regclass('message_outbox_p_legacy') IS NOT NULL AS exists
        FROM retention_partition WHERE partition = 'message_outbox_p_legacy'`;
      assert.deepEqual(row, { state: 'detached', exists: true }, 'the partition is kept, not dropped');

      // Once the link is gone (or a regular temp file a killed run left is there), the next run archives it.
      await rm(planted);
      await writeFile(planted, 'left by a run that was killed');
      const report = await runOn(db, dir);
      assert.ok(
        report.partitions.some((p) => p.partition === 'message_outbox_p_legacy' && p.outcome === 'dropped'),
        JSON.stringify(report.partitions),
      );
      assert.equal((await stat(join(dir, 'message_outbox', 'message_outbox_p_legacy.csv.gz'))).mode & 0o777, 0o600);
    } finally {
      await db.drop();
    }
  });
}
