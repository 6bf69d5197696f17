import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { connect, enqueue, type Sql } from '@postbox/engine';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { createTopic, uniqueTopic } from '../support/kafka.ts';
import { shortPartitions } from '../support/partitions.ts';
import { Pipeline, stopGracefully } from '../support/pipeline.ts';
import { spawnPostbox, waitFor } from '../support/processes.ts';
import { stack } from '../support/stack.ts';

// Least privilege (issue 24): `postbox migrate --roles` makes postbox_producer, _relay, _consumer, _api and
// _operator with the narrowest grants each needs, idempotently, and prints the matrix the catalog enforces. Login
// roles made members of them are refused what their command never does (the relay reads no business table, no
// inbox, no failure store; the consumer no outbox payload; the control plane deletes no outbox row), and a whole
// pipeline runs with them: a writer as the producer, `postbox relay` and `postbox consume` each with its own URL,
// making partitions ahead through the owner's function, the daily retention left to the owner.
let db: TestDatabase;
const suffix = randomBytes(3).toString('hex');
const logins = {
  producer: `pbx_producer_${suffix}`,
  relay: `pbx_relay_${suffix}`,
  consumer: `pbx_consumer_${suffix}`,
  api: `pbx_api_${suffix}`,
} as const;
const PASSWORD = `pw-${randomBytes(8).toString('hex')}`;
const pools: Sql[] = [];
const extraLogins: string[] = [];
let pipeline: Pipeline | null = null;
let archiveDir: string;

before(async () => {
  db = await freshDatabase('pbroles');
  archiveDir = await mkdtemp(join(tmpdir(), 'postbox-archive-'));
});

after(async () => {
  await pipeline?.stopAll();
  await Promise.all(pools.map((p) => p.end({ timeout: 5 })));
  await db?.drop();
  for (const login of [...Object.values(logins), ...extraLogins]) await dropLogin(login);
  await rm(archiveDir, { recursive: true, force: true });
});

/** The URL of the test database as `login`. */
function urlAs(login: string): string {
  const u = new URL(db.url);
  u.username = login;
  u.password = PASSWORD;
  return u.toString();
}

function poolAs(login: string): Sql {
  const sql = connect({ url: urlAs(login), max: 2, applicationName: 'postbox-test-roles' });
  pools.push(sql);
  return sql;
}

async function dropLogin(login: string): Promise<void> {
  const admin = connect({ url: stack.DATABASE_URL, max: 1 });
  try {
    await admin.unsafe(`DROP ROLE IF EXISTS ${login}`);
  } finally {
    await admin.end({ timeout: 5 });
  }
}

/** Runs `statement` and returns the SQLSTATE it failed with (null: it succeeded). */
async function sqlState(sql: Sql, statement: string): Promise<string | null> {
  try {
    await sql.unsafe(statement);
    return null;
  } catch (cause) {
    return (cause as { code?: string }).code ?? String(cause);
  }
}

test('postbox migrate --roles is idempotent and prints the grants matrix the catalog enforces', async () => {
  for (let i = 0; i < 2; i++) {
    const run = spawnPostbox(['migrate', '--roles'], { DATABASE_URL: db.url });
    assert.equal(await run.exited, 0, run.output());
    assert.match(
      run.output(),
      /roles: postbox_producer, postbox_relay, postbox_consumer, postbox_api, postbox_operator/,
    );
  }
  const print = spawnPostbox(['migrate', '--roles', '--print'], { DATABASE_URL: db.url });
  assert.equal(await print.exited, 0, print.output());
  const rows = new Map(
    print
      .output()
      .split('\n')
      .map((l) => l.trim().split(/\s+/))
      .filter((cells) => cells.length === 6)
      .map(([table, ...cells]) => [table!, cells]),
  );
  // producer, relay, consumer, api, operator
  assert.deepEqual(rows.get('message_outbox'), ['sI', 'SU', 'sI', 'SIU', 'SIU']);
  assert.deepEqual(rows.get('relay_lane'), ['-', 'SU', '-', 'S', 'S']);
  assert.deepEqual(rows.get('message_inbox'), ['-', '-', 'SIUD', 'SID', 'SID']);
  assert.deepEqual(rows.get('message_failure'), ['-', '-', 'SIU', 'SU', 'SU']);
  assert.deepEqual(rows.get('message_outbox_key'), ['-', '-', 'S', 'S', 'S']);
  assert.ok(rows.size >= 26, `a row per Postbox table: ${[...rows.keys()].join(', ')}`);
});

test('each role is refused what its command never does', async () => {
  await db.sql.unsafe(`
    CREATE ROLE ${logins.producer} LOGIN PASSWORD '${PASSWORD}' IN ROLE postbox_producer;
    CREATE ROLE ${logins.relay} LOGIN PASSWORD '${PASSWORD}' IN ROLE postbox_relay;
    CREATE ROLE ${logins.consumer} LOGIN PASSWORD '${PASSWORD}' IN ROLE postbox_consumer;
    CREATE ROLE ${logins.api} LOGIN PASSWORD '${PASSWORD}' IN ROLE postbox_api`);
  const relay = poolAs(logins.relay);
  const consumer = poolAs(logins.consumer);
  const api = poolAs(logins.api);
  const producer = poolAs(logins.producer);
  const denied = '42501';
  assert.equal(await sqlState(relay, 'SELECT * FROM demo_order LIMIT 1'), denied, 'relay: a business table');
  assert.equal(await sqlState(relay, 'SELECT * FROM message_failure LIMIT 1'), denied, 'relay: the failure store');
  assert.equal(await sqlState(relay, 'SELECT * FROM message_inbox LIMIT 1'), denied, 'relay: the inbox');
  assert.equal(await sqlState(relay, 'DELETE FROM message_outbox'), denied, 'relay: deleting outbox rows');
  assert.equal(await sqlState(relay, 'SELECT * FROM message_outbox LIMIT 1'), null, 'relay: reads the outbox');
  assert.equal(await sqlState(consumer, 'SELECT payload FROM message_outbox LIMIT 1'), denied, 'consumer: payloads');
  assert.equal(await sqlState(consumer, 'UPDATE relay_lane SET owner = NULL'), denied, 'consumer: the relay leases');
  assert.equal(await sqlState(api, 'DELETE FROM message_outbox'), denied, 'api: deleting outbox rows');
  assert.equal(await sqlState(api, 'TRUNCATE message_outbox'), denied, 'api: truncating the outbox');
  assert.equal(await sqlState(api, 'UPDATE relay_lane SET owner = NULL'), denied, 'api: the relay leases');
  assert.equal(await sqlState(api, 'SELECT count(*) FROM message_failure'), null, 'api: reads the failure store');
  assert.equal(
    await sqlState(relay, "SELECT postbox_premake('demo_order', 86400, 1)"),
    '22023',
    'the owner-rights function makes partitions of the two Postbox tables only',
  );
  assert.equal(await sqlState(api, "SELECT postbox_premake('message_outbox', 86400, 1)"), denied, 'api: premake');
  for (const call of [
    "SELECT postbox_premake('message_outbox', 100000)",
    "SELECT postbox_premake('message_inbox', 0)",
    "SELECT postbox_premake('message_outbox', 1, 100000)",
  ])
    assert.equal(await sqlState(relay, call), '22023', `no partitions without bound: ${call}`);

  // The producer enqueues in its own transaction; the key registry its insert keeps is the owner's business.
  const id = '01890a5d-ac96-774b-bcce-b302099a8057';
  await producer.begin((tx) =>
    enqueue(
      tx,
      { event_id: id, event_type: 'RoleEvent', aggregate_id: 'roles-1', aggregate_version: 1, data: {} },
      { topic: 'roles', producer: 'test' },
    ),
  );
  assert.equal(await sqlState(producer, 'SELECT payload FROM message_outbox LIMIT 1'), denied, 'producer: payloads');
  const [key] = await db.sql<{ n: number }[]>`
    SELECT count(*)::int AS n FROM message_outbox_key WHERE aggregate_id = 'roles-1' AND event_id = ${id}`;
  assert.equal(key!.n, 1, "the producer's insert kept the (aggregate, version) registry");
});

/** The roles' logins, and one login in no Postbox role: an attacker with nothing but CONNECT and TEMP. */
async function everyLogin(): Promise<Array<[string, Sql]>> {
  const outsider = `pbx_outsider_${suffix}`;
  await dropLogin(outsider);
  await db.sql.unsafe(`CREATE ROLE ${outsider} LOGIN PASSWORD '${PASSWORD}'`);
  await db.sql.unsafe(`GRANT USAGE ON SCHEMA ${await schemaOf(db.sql)} TO ${outsider}`);
  extraLogins.push(outsider);
  return [...Object.values(logins), outsider].map((login) => [login, poolAs(login)]);
}

async function schemaOf(sql: Sql): Promise<string> {
  const [row] = await sql<{ schema: string }[]>`SELECT current_schema() AS schema`;
  return row!.schema;
}

test("no role can run the key registry's trigger functions on a table of its own", async () => {
  const id = '01890a5d-ac96-774b-bcce-b302099a8058';
  await db.sql.begin((tx) =>
    enqueue(
      tx,
      { event_id: id, event_type: 'RoleEvent', aggregate_id: 'registry-1', aggregate_version: 1, data: {} },
      { topic: 'roles', producer: 'test' },
    ),
  );
  const keys = async () => {
    const rows = await db.sql<{ aggregate_id: string; aggregate_version: string }[]>`
      SELECT aggregate_id, aggregate_version::text FROM message_outbox_key ORDER BY 1, 2`;
    return rows.map((r) => `${r.aggregate_id}@${r.aggregate_version}`);
  };
  const before = await keys();
  assert.ok(before.includes('registry-1@1'), `the registry holds the event's key: ${before.join(', ')}`);
  const table = 'CREATE TEMP TABLE t (aggregate_id text, aggregate_version bigint, event_id uuid)';
  const attacks = {
    truncate: `${table}; CREATE TRIGGER t_wipe AFTER TRUNCATE ON t FOR EACH STATEMENT
               EXECUTE FUNCTION postbox_outbox_key_truncate(); TRUNCATE t`,
    insert: `${table}; CREATE TRIGGER t_plant AFTER INSERT ON t REFERENCING NEW TABLE AS new_rows
             FOR EACH STATEMENT EXECUTE FUNCTION postbox_outbox_key_insert();
             INSERT INTO t VALUES ('planted', 7, '01890a5d-ac96-774b-bcce-b302099a8059')`,
    delete: `${table}; CREATE TRIGGER t_remove AFTER DELETE ON t REFERENCING OLD TABLE AS old_rows
             FOR EACH STATEMENT EXECUTE FUNCTION postbox_outbox_key_delete();
             INSERT INTO t VALUES ('registry-1', 1, '${id}'); DELETE FROM t`,
  };
  for (const [login, sql] of await everyLogin()) {
    for (const [what, attack] of Object.entries(attacks)) {
      assert.equal(await sqlState(sql, attack), '42501', `${login}: the ${what} trigger function is not executable`);
      assert.deepEqual(await keys(), before, `${login}: the ${what} attack left the registry as it was`);
    }
  }
  // The owner may run them, but only as the outbox's own triggers: on any other table they refuse.
  for (const [what, attack] of Object.entries(attacks)) {
    assert.equal(await sqlState(db.sql, attack), '42501', `owner: the ${what} trigger function on another table`);
    assert.deepEqual(await keys(), before, `owner: the ${what} attack left the registry as it was`);
  }
});

test('every SECURITY DEFINER function is executable by exactly the roles that need it', async () => {
  const rows = await db.sql<{ fn: string; executors: string[] }[]>`
    SELECT p.oid::regprocedure::text AS fn,
           array(SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee)::text END
                 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                 WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner
                 ORDER BY 1) AS executors
    FROM pg_proc p
    WHERE p.prosecdef AND p.pronamespace = current_schema()::regnamespace
    ORDER BY 1`;
  const table = Object.fromEntries(rows.map((r) => [r.fn, r.executors.join(' ') || '(owner only)']));
  console.log('SECURITY DEFINER functions and who may execute them besides their owner:');
  for (const [fn, who] of Object.entries(table)) console.log(`  ${fn.padEnd(44)} ${who}`);
  assert.deepEqual(table, {
    'postbox_outbox_key_delete()': '(owner only)',
    'postbox_outbox_key_insert()': '(owner only)',
    'postbox_outbox_key_truncate()': '(owner only)',
    'postbox_premake(text,integer)': 'postbox_consumer postbox_relay',
  });
});

test("a narrow role cannot choose the partition period: the table's own period is used", async () => {
  const relay = poolAs(logins.relay);
  await shortPartitions(db.sql, 2, 3);
  const widths = async () => {
    const rows = await db.sql<{ seconds: number }[]>`
      SELECT DISTINCT extract(epoch FROM postbox_uuid_time(range_to) - postbox_uuid_time(range_from))::int AS seconds
      FROM postbox_partitions('message_outbox'::regclass) WHERE range_from IS NOT NULL AND range_to IS NOT NULL`;
    return rows.map((r) => r.seconds);
  };
  assert.deepEqual(await widths(), [2]);
  // A year-long period asked for by the relay: refused outright, or ignored for the table's 2 s.
  const asked = await sqlState(relay, "SELECT postbox_premake('message_outbox', 366 * 86400, 3)");
  assert.ok(asked === null || asked === '42501' || asked === '42883', `the 3-argument call: ${asked}`);
  assert.deepEqual(await widths(), [2], 'every partition is 2 s long, whatever the caller asked');
  const [made] = await relay<{ n: number }[]>`SELECT postbox_premake('message_outbox', 20) AS n`;
  assert.ok(made!.n >= 1, "the relay made partitions ahead in the table's period");
  assert.deepEqual(await widths(), [2]);
  // As many as it likes: at most 100 ahead for a narrow role.
  const ahead = async () => {
    const [row] = await db.sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM postbox_partitions('message_outbox'::regclass)
      WHERE range_from IS NOT NULL AND postbox_uuid_time(range_from) > now()`;
    return row!.n;
  };
  for (let i = 0; i < 4; i++) await relay`SELECT postbox_premake('message_outbox', 1000)`;
  assert.ok((await ahead()) <= 101, `at most 100 partitions ahead: ${await ahead()}`);
  // The period is seconds, not days: a day added across a DST change in the caller's time zone stays 24 h.
  await shortPartitions(db.sql, 86_400, 2);
  const reserved = await relay.reserve();
  try {
    await reserved`SET TimeZone = 'America/New_York'`;
    const [dst] = await reserved<{ hours: string }[]>`
      SELECT extract(epoch FROM ('2026-03-08 00:00'::timestamptz + postbox_partition_period('message_outbox'))
                               - '2026-03-08 00:00'::timestamptz) / 3600 AS hours`;
    assert.equal(Number(dst!.hours), 24, 'a day partition is 24 h in any time zone');
  } finally {
    reserved.release();
  }
});

test('postbox migrate --roles refuses a Postbox role that already exists with powers it must not have', async () => {
  for (const [grant, undo, named] of [
    ['ALTER ROLE postbox_relay CREATEROLE', 'ALTER ROLE postbox_relay NOCREATEROLE', /postbox_relay.*CREATEROLE/],
    ['ALTER ROLE postbox_api BYPASSRLS', 'ALTER ROLE postbox_api NOBYPASSRLS', /postbox_api.*BYPASSRLS/],
    [
      'GRANT pg_write_all_data TO postbox_consumer',
      'REVOKE pg_write_all_data FROM postbox_consumer',
      /postbox_consumer.*pg_write_all_data/,
    ],
    // A superuser two grants away, through a role that looks harmless.
    [
      `CREATE ROLE pbx_admin_${suffix} SUPERUSER NOLOGIN; CREATE ROLE pbx_mid_${suffix} NOLOGIN IN ROLE pbx_admin_${suffix};
       GRANT pbx_mid_${suffix} TO postbox_relay`,
      `REVOKE pbx_mid_${suffix} FROM postbox_relay; DROP ROLE pbx_mid_${suffix}; DROP ROLE pbx_admin_${suffix}`,
      new RegExp(
        `postbox_relay \\(member of pbx_admin_${suffix} through pbx_mid_${suffix}\\).*REVOKE "pbx_mid_${suffix}" FROM "postbox_relay"`,
      ),
    ],
  ] as const) {
    await db.sql.unsafe(grant);
    try {
      const run = spawnPostbox(['migrate', '--roles'], { DATABASE_URL: db.url });
      assert.notEqual(await run.exited, 0, `${grant}: ${run.output()}`);
      assert.match(run.output(), named, run.output());
    } finally {
      await db.sql.unsafe(undo);
    }
  }
  const run = spawnPostbox(['migrate', '--roles'], { DATABASE_URL: db.url });
  assert.equal(await run.exited, 0, run.output());
});

test('a pipeline runs with the narrow roles: producer, relay and consumer each on its own URL', {
  timeout: 240_000,
}, async () => {
  const topic = uniqueTopic('roles');
  await createTopic(topic, 3);
  const p = (pipeline = new Pipeline({
    databaseUrl: db.url,
    kafkaBrokers: stack.KAFKA_BROKERS,
    redisUrl: stack.REDIS_URL,
    topic,
    partitions: 3,
    consumer: `roles${suffix}`,
    env: {
      DATABASE_URL_RELAY: urlAs(logins.relay),
      DATABASE_URL_CONSUMER: urlAs(logins.consumer),
      // Partitions of 2 s: the relay and the consumer must make new ones as they run, with the owner's function.
      POSTBOX_PARTITION_PERIOD_S: '2',
      POSTBOX_PARTITION_AHEAD: '5',
      POSTBOX_ARCHIVE_DIR: archiveDir,
    },
  }));
  await p.setup();
  // What the application grants its own roles on its own tables.
  await db.sql.unsafe(`
    GRANT SELECT, INSERT, UPDATE ON fault_aggregate TO postbox_producer;
    GRANT SELECT, INSERT, UPDATE ON test_applied, demo_order_projection TO postbox_consumer;
    GRANT SELECT ON test_handler_control TO postbox_consumer;
    GRANT USAGE ON SEQUENCE test_applied_seq_seq TO postbox_consumer`);
  const partitionsNow = async () => {
    const [row] = await db.sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM postbox_partitions('message_outbox'::regclass) WHERE NOT is_default`;
    return row!.n;
  };
  // The day partitions give way to 2 s ones from now on, so that the roles must make more as they run (the
  // previous test's one event goes with the legacy partition).
  await shortPartitions(db.sql, 2, 5);
  const before = await partitionsNow();
  const writer = p.writer({ DATABASE_URL: urlAs(logins.producer), WRITER_RATE: '40', WRITER_AGGREGATES: '10' });
  const relay = p.relay({ LOG_LEVEL: 'info' });
  const consumer = p.consumer({ LOG_LEVEL: 'info' });
  await sleep(8000);
  const users = await db.sql<{ usename: string }[]>`
    SELECT DISTINCT usename::text FROM pg_stat_activity WHERE datname = current_database()`;
  for (const login of [logins.producer, logins.relay, logins.consumer])
    assert.ok(
      users.some((u) => u.usename === login),
      `${login} is connected: ${users.map((u) => u.usename).join(', ')}`,
    );
  await stopGracefully(writer, 'writer', 'writer started');
  const report = await p.settle(120_000, { stuckAfterMs: 30_000 });
  assert.ok(report.ok, JSON.stringify(report.violations));
  const [applied] = await db.sql<{ n: number; events: number }[]>`
    SELECT count(*)::int AS n, (SELECT count(*) FROM message_outbox WHERE topic = ${topic})::int AS events
    FROM test_applied WHERE consumer = ${p.o.consumer}`;
  assert.ok(applied!.events > 100, `${applied!.events} events written by the producer role`);
  assert.equal(applied!.n, applied!.events, 'every event applied once by the consumer role');
  assert.ok((await partitionsNow()) > before, 'the relay and consumer roles made partitions ahead');
  for (const [what, proc] of [
    ['relay', relay],
    ['consumer', consumer],
  ] as const) {
    assert.doesNotMatch(proc.output(), /could not make the partitions ahead/, `${what}: ${proc.output()}`);
    await waitFor(
      `${what} to say retention is the owner's`,
      async () => /retention run is off/.test(proc.output()),
      10_000,
      100,
    );
  }
});
