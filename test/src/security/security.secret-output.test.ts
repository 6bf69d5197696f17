import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { makeCertificateAuthority, stackStatus } from '@postbox/stack';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { startPrivateStack, type PrivateStack } from '../support/private-stack.ts';
import { spawnPostbox, type RoleProcess } from '../support/processes.ts';

// Passwords in connection strings never reach output (issue 45): a link check that fails names the link and its
// address without the password of its URL, and the stack's status prints every external server's address
// masked, whatever its scheme (amqps:, tls:, a multi-host PostgreSQL URL).
const CANARY = 'CANARY-pw-4242';
let nats: PrivateStack;
let db: TestDatabase;
let scratch: string;
let otherCa: string;

before(async () => {
  nats = await startPrivateStack({ nats: true, tls: true });
  db = await freshDatabase();
  scratch = await fs.mkdtemp(path.join(os.tmpdir(), 'postbox-secret-output-'));
  otherCa = (await makeCertificateAuthority(scratch, 'Some other CA')).caFile;
});

after(async () => {
  await db?.drop();
  await nats?.stop();
  if (scratch) await fs.rm(scratch, { recursive: true, force: true });
});

/** The exit code of a command that must stop by itself; one still running after 30 s is killed and fails. */
async function exitCode(p: RoleProcess): Promise<number | null> {
  const timer = setTimeout(() => p.kill('SIGKILL'), 30_000);
  try {
    const code = await p.exited;
    assert.notEqual(p.child.signalCode, 'SIGKILL', `still running after 30 s:\n${p.output().slice(-2000)}`);
    return code;
  } finally {
    clearTimeout(timer);
  }
}

test('a NATS link check that fails over TLS names the link and its address, not the password of its URL', async () => {
  const port = new URL(nats.tlsEnv!.NATS_URL!).port;
  const relay = spawnPostbox(['relay'], {
    DATABASE_URL: db.url,
    POSTBOX_BROKER: 'nats',
    NATS_URL: `tls://postbox-relay:${CANARY}@localhost:${port}`,
    NATS_TLS_CA: otherCa,
    POSTBOX_TOPICS: 'secret.output:1',
    LOG_LEVEL: 'warn',
  });
  assert.notEqual(await exitCode(relay), 0, relay.output());
  assert.match(relay.output(), /NATS link \(tls:\/\/postbox-relay:\*\*\*@localhost:\d+\): TLS: /, relay.output());
  assert.ok(!relay.output().includes(CANARY), relay.output());
});

const SERVICE_OF: Record<string, string> = { DATABASE_URL: 'postgres', RABBITMQ_URL: 'rabbitmq', NATS_URL: 'nats' };

test("the stack's status masks the password of every external server, whatever its scheme", async () => {
  const cases: Array<Record<string, string>> = [
    {
      POSTBOX_BROKER: 'rabbitmq',
      RABBITMQ_URL: `amqps://postbox:${CANARY}@127.0.0.1:1/?insecure`,
      DATABASE_URL: `postgres://postbox:${CANARY}@127.0.0.1:1,127.0.0.1:2/postbox`,
    },
    { POSTBOX_BROKER: 'nats', NATS_URL: `tls://postbox:${CANARY}@127.0.0.1:1` },
  ];
  const saved = { ...process.env };
  try {
    for (const env of cases) {
      Object.assign(process.env, env);
      const { services } = await stackStatus();
      const names = Object.keys(env).flatMap((v) => SERVICE_OF[v] ?? []);
      const external = services.filter((s) => names.includes(s.name));
      assert.equal(external.length, names.length, JSON.stringify(services));
      for (const s of external) assert.ok(!s.address.includes(CANARY), `${s.name}: ${s.address}`);
      for (const s of external) assert.match(s.address, /:\*\*\*@/, `${s.name}: ${s.address}`);
      for (const name of Object.keys(env)) delete process.env[name];
      Object.assign(process.env, saved);
    }
  } finally {
    for (const name of Object.keys(process.env)) if (!(name in saved)) delete process.env[name];
    Object.assign(process.env, saved);
  }
});
