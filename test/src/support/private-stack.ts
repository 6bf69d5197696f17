import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import {
  freePort,
  privateKafka,
  privateNats,
  privatePostgres,
  privateRabbitmq,
  privateRedis,
  ensureTlsMaterial,
  kafkaTlsEnv,
  natsTlsUrl,
  postgresTlsUrl,
  rabbitmqTlsUrl,
  redisTlsUrl,
  stopEpmd,
  type PrivateServer,
  type TlsMaterial,
} from '@postbox/stack';
import { connect } from '@postbox/engine';
import { FaultProxy } from './fault-proxy.ts';
import { waitFor } from './processes.ts';

/**
 * Private servers for tests that kill, pause, cut or fill them (the shared stack is never touched): started from
 * the stack's own modules under a fresh home in the temp directory, on free ports, and stopped — and their home
 * removed — by `stop()`, which a test calls in `after()`. Should the test process itself die, an exit hook
 * SIGKILLs every server still running and unmounts its tmpfs.
 */
export interface PrivateStackOptions {
  kafka?: {
    /** Put a FaultProxy in front: the broker advertises the proxy's port, so every client goes through it. */
    proxy?: boolean;
    /** Extra server.properties lines. */
    properties?: string;
  };
  postgres?: {
    /** Data directory on a tmpfs of this many MiB (disk-full tests). */
    tmpfsMb?: number;
    settings?: string[];
    /** A FaultProxy in front: `urls.DATABASE_URL` goes through it. */
    proxy?: boolean;
  };
  redis?: boolean | { proxy?: boolean };
  /** NATS with JetStream (file storage under the home). */
  nats?: boolean;
  /** A RabbitMQ node of its own (ports, epmd, cookie, data under the home). */
  rabbitmq?: boolean;
  /**
   * The stack's TLS material made under the home: PostgreSQL serves TLS too, Redis and Kafka get a TLS port each
   * (SASL_SSL + SCRAM for Kafka, an ACL user for Redis, AMQPS for RabbitMQ) and NATS requires TLS; `tlsEnv` is
   * what a client reaching them over TLS sets (NATS_URL, RABBITMQ_URL for those brokers).
   */
  tls?: boolean;
  /**
   * An address of this machine for PostgreSQL and Redis to listen on besides loopback, and for Kafka to listen on
   * and advertise instead of it: a test bridge's (support/netns.ts), so that roles in network namespaces reach
   * them. `urls` and `direct` then name it.
   */
  host?: string;
}

export interface PrivateStack {
  home: string;
  /** The `host` option: the servers' address besides loopback. */
  host?: string;
  kafka: PrivateServer | null;
  postgres: PrivateServer | null;
  redis: PrivateServer | null;
  nats: PrivateServer | null;
  rabbitmq: PrivateServer | null;
  proxies: { kafka?: FaultProxy; postgres?: FaultProxy; redis?: FaultProxy };
  /** What clients use (through the proxies where there are), for the servers started here. */
  urls: Partial<{
    DATABASE_URL: string;
    KAFKA_BROKERS: string;
    REDIS_URL: string;
    NATS_URL: string;
    RABBITMQ_URL: string;
  }>;
  /** The direct addresses, around any proxy. */
  direct: Partial<{ DATABASE_URL: string; KAFKA_BROKERS: string; REDIS_URL: string }>;
  /** With `tls`: the environment of a client that reaches the servers started here over TLS only. */
  tlsEnv?: Record<string, string>;
  tlsPorts?: { redis?: number; kafka?: number; rabbitmq?: number };
  tlsMaterial?: TlsMaterial;
  stop(): Promise<void>;
}

const running = new Set<PrivateStack>();
const pids = new Map<PrivateServer, number>();
const mounts = new Set<string>();

process.on('exit', () => {
  for (const pid of pids.values()) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone already
    }
  }
  for (const dir of mounts) spawnSync('umount', ['-l', dir]);
  // A node just killed stays registered until its epmd sees the connection close: asked again for a while.
  for (const port of epmdPorts.values())
    for (let attempt = 0; attempt < 10; attempt++) {
      const r = spawnSync('epmd', ['-kill'], {
        env: { ...process.env, ERL_EPMD_PORT: String(port) },
        encoding: 'utf8',
      });
      if (!/not allowed/i.test(r.stdout ?? '')) break;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 200);
    }
});

export async function startPrivateStack(options: PrivateStackOptions): Promise<PrivateStack> {
  const home = path.join(os.tmpdir(), `postbox-faults-${randomBytes(4).toString('hex')}`);
  await fs.mkdir(home, { recursive: true });
  const stack: PrivateStack = {
    home,
    ...(options.host ? { host: options.host } : {}),
    kafka: null,
    postgres: null,
    redis: null,
    nats: null,
    rabbitmq: null,
    proxies: {},
    urls: {},
    direct: {},
    stop: () => stopStack(stack),
  };
  running.add(stack);
  try {
    if (options.tls) {
      stack.tlsMaterial = await ensureTlsMaterial(path.join(home, 'tls'));
      stack.tlsPorts = { redis: await freePort(), kafka: await freePort(), rabbitmq: await freePort() };
      stack.tlsEnv = {};
    }
    const starts: Promise<void>[] = [];
    if (options.postgres) starts.push(startPostgres(stack, options.postgres));
    if (options.redis) starts.push(startRedis(stack, typeof options.redis === 'object' ? options.redis : {}));
    if (options.kafka) starts.push(startKafka(stack, options.kafka));
    if (options.nats) starts.push(startNats(stack));
    if (options.rabbitmq) starts.push(startRabbitmq(stack));
    const results = await Promise.allSettled(starts);
    const failed = results.find((r) => r.status === 'rejected');
    if (failed) throw (failed as PromiseRejectedResult).reason;
    return stack;
  } catch (cause) {
    await stopStack(stack).catch(() => {});
    throw new Error(`private stack did not start (home ${home}): ${(cause as Error).message}`, { cause });
  }
}

async function track(server: PrivateServer): Promise<void> {
  const pid = await server.pid();
  if (pid !== undefined) pids.set(server, pid);
}

/** Restarts a private server after a kill or stop, and tracks its new pid. */
export async function restart(server: PrivateServer, timeoutMs = 180_000): Promise<void> {
  await server.start(timeoutMs);
  await track(server);
}

async function startKafka(stack: PrivateStack, o: NonNullable<PrivateStackOptions['kafka']>): Promise<void> {
  const broker = await freePort();
  const controller = await freePort();
  let advertised: number | undefined;
  if (o.proxy) {
    const proxy = await FaultProxy.start({ upstream: { host: '127.0.0.1', port: broker }, protocol: 'kafka' });
    stack.proxies.kafka = proxy;
    advertised = proxy.port;
  }
  // Consumers restarted after a kill rejoin as soon as the dead member's (short) session ends.
  const properties = `group.min.session.timeout.ms=1000\n${o.properties ?? ''}`;
  const tls = stack.tlsMaterial;
  const host = stack.host ?? '127.0.0.1';
  stack.kafka = privateKafka(
    path.join(stack.home, 'k'),
    { broker, controller, ...(advertised ? { advertised } : {}), ...(tls ? { tls: stack.tlsPorts!.kafka! } : {}) },
    properties,
    tls,
    host,
  );
  await restart(stack.kafka);
  stack.urls.KAFKA_BROKERS = stack.kafka.url;
  stack.direct.KAFKA_BROKERS = `${host}:${broker}`;
  if (tls) Object.assign(stack.tlsEnv!, kafkaTlsEnv(stack.tlsPorts!.kafka!, tls));
}

async function startPostgres(stack: PrivateStack, o: NonNullable<PrivateStackOptions['postgres']>): Promise<void> {
  const port = await freePort();
  const home = path.join(stack.home, 'p');
  if (o.tmpfsMb) {
    const dir = path.join(home, 'pg');
    await fs.mkdir(dir, { recursive: true });
    const mount = spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${o.tmpfsMb}m,mode=0755`, 'tmpfs', dir], {
      encoding: 'utf8',
    });
    if (mount.status !== 0)
      throw new Error(`could not mount a ${o.tmpfsMb} MiB tmpfs on ${dir}: ${mount.stderr.trim()}`);
    mounts.add(dir);
  }
  const listen = stack.host ? [`listen_addresses=127.0.0.1,${stack.host}`] : [];
  stack.postgres = privatePostgres(home, port, [...(o.settings ?? []), ...listen], stack.tlsMaterial);
  await restart(stack.postgres);
  if (stack.host) await allowHost(stack.postgres, stack.host);
  if (stack.tlsMaterial) stack.tlsEnv!.DATABASE_URL = postgresTlsUrl(port, stack.tlsMaterial);
  const url = stack.host ? stack.postgres.url.replace('@127.0.0.1:', `@${stack.host}:`) : stack.postgres.url;
  stack.direct.DATABASE_URL = url;
  stack.urls.DATABASE_URL = url;
  if (o.proxy) {
    const proxy = await FaultProxy.start({ upstream: { host: '127.0.0.1', port }, protocol: 'postgres' });
    stack.proxies.postgres = proxy;
    stack.urls.DATABASE_URL = stack.postgres.url.replace(`:${port}/`, `:${proxy.port}/`);
  }
}

/**
 * initdb's pg_hba.conf admits loopback clients only: clients on the test bridge's subnet (the namespaces, and the
 * test itself through the bridge address) get a password line too, read by a reload.
 */
async function allowHost(server: PrivateServer, host: string): Promise<void> {
  const subnet = `${host.split('.').slice(0, 3).join('.')}.0/24`;
  await fs.appendFile(path.join(server.dataDir, 'pg_hba.conf'), `host all all ${subnet} scram-sha-256\n`);
  await server.signal('SIGHUP');
  const sql = connect({ url: server.url.replace('@127.0.0.1:', `@${host}:`), max: 1, applicationName: 'postbox-test' });
  try {
    await waitFor(
      'PostgreSQL to admit the bridge address',
      () =>
        sql`SELECT 1`.then(
          () => true,
          () => false,
        ),
      10_000,
      100,
    );
  } finally {
    await sql.end({ timeout: 1 });
  }
}

async function startRedis(stack: PrivateStack, o: { proxy?: boolean }): Promise<void> {
  const port = await freePort();
  const tls = stack.tlsMaterial;
  stack.redis = privateRedis(
    path.join(stack.home, 'r'),
    port,
    tls ? { material: tls, port: stack.tlsPorts!.redis! } : undefined,
    stack.host,
  );
  await restart(stack.redis);
  if (tls) stack.tlsEnv!.REDIS_URL = redisTlsUrl(stack.tlsPorts!.redis!, tls);
  const url = stack.host ? `redis://${stack.host}:${port}` : stack.redis.url;
  stack.direct.REDIS_URL = url;
  stack.urls.REDIS_URL = url;
  if (o.proxy) {
    const proxy = await FaultProxy.start({ upstream: { host: '127.0.0.1', port } });
    stack.proxies.redis = proxy;
    stack.urls.REDIS_URL = `redis://127.0.0.1:${proxy.port}`;
  }
}

async function startNats(stack: PrivateStack): Promise<void> {
  const port = await freePort();
  stack.nats = privateNats(path.join(stack.home, 'n'), port, stack.tlsMaterial, stack.host);
  await restart(stack.nats);
  stack.urls.NATS_URL = stack.nats.url;
  if (stack.tlsMaterial)
    Object.assign(stack.tlsEnv!, { NATS_URL: natsTlsUrl(port), NATS_TLS_CA: stack.tlsMaterial.caFile });
}

/** The epmd port of each private RabbitMQ node: the daemon its node started outlives it, and is ended here. */
const epmdPorts = new Map<PrivateServer, number>();

async function startRabbitmq(stack: PrivateStack): Promise<void> {
  const ports = { amqp: await freePort(), dist: await freePort(), epmd: await freePort() };
  const tls = stack.tlsMaterial;
  stack.rabbitmq = privateRabbitmq(
    path.join(stack.home, 'q'),
    ports,
    tls ? { material: tls, port: stack.tlsPorts!.rabbitmq! } : undefined,
    stack.host,
  );
  epmdPorts.set(stack.rabbitmq, ports.epmd);
  await restart(stack.rabbitmq);
  stack.urls.RABBITMQ_URL = stack.rabbitmq.url;
  if (tls) stack.tlsEnv!.RABBITMQ_URL = rabbitmqTlsUrl(stack.tlsPorts!.rabbitmq!, tls);
}

async function stopStack(stack: PrivateStack): Promise<void> {
  running.delete(stack);
  const errors: unknown[] = [];
  // The data is thrown away: no graceful shutdown needed (a Kafka controlled shutdown alone takes seconds).
  // PostgreSQL gets its immediate stop (SIGQUIT), so the postmaster ends its backends and shared memory.
  await Promise.all(
    [stack.kafka, stack.redis, stack.postgres, stack.nats, stack.rabbitmq].map(async (server) => {
      if (!server) return;
      try {
        if ((await server.pid()) !== undefined) {
          await server.signal('SIGCONT').catch(() => 0);
          await server.signal(server.name === 'postgres' ? 'SIGQUIT' : 'SIGKILL').catch(() => 0);
          await server.waitForExit(30_000);
        }
      } catch (cause) {
        errors.push(cause);
        await server.signal('SIGKILL').catch(() => 0);
      }
      pids.delete(server);
      const epmd = epmdPorts.get(server);
      if (epmd !== undefined) {
        await stopEpmd(epmd);
        epmdPorts.delete(server);
      }
    }),
  );
  for (const proxy of Object.values(stack.proxies)) await proxy?.close();
  for (const dir of [...mounts].filter((m) => m.startsWith(stack.home))) {
    const r = spawnSync('umount', [dir], { encoding: 'utf8' });
    if (r.status !== 0) spawnSync('umount', ['-l', dir]);
    mounts.delete(dir);
  }
  await fs.rm(stack.home, { recursive: true, force: true });
  if (errors.length > 0)
    throw new Error(
      `stopping the private stack in ${stack.home}: ${errors.map((e) => (e as Error).message).join('; ')}`,
      { cause: errors[0] },
    );
}

export { createPrivateTopic } from './private-topic.ts';
