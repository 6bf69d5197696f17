import fs from 'node:fs/promises';
import path from 'node:path';
import { kafkaService } from './kafka.ts';
import { natsService } from './nats.ts';
import { rabbitmqService } from './rabbitmq.ts';
import { defaultHome, stackPaths, type StackPaths } from './paths.ts';
import { postgresService } from './postgres.ts';
import { isAlive, waitForExit } from './process.ts';
import { redisService } from './redis.ts';
import { ensureDown, ensureUp, type LocalService } from './service.ts';
import type { TlsMaterial } from './tls.ts';

/**
 * A private instance of one of the stack's servers, for tests that kill, stop, pause or fill it and so must not
 * touch the shared one: its own home (data, logs, pid file) and ports, the same start-up code and settings as
 * the stack (durability included), and the stack's cached Kafka jars (nothing is downloaded). Detached like the
 * stack's servers: the caller must `stop()` it (and should `kill('SIGKILL')` it on exit).
 */
export interface PrivateServer {
  readonly name: 'postgres' | 'redis' | 'kafka' | 'nats' | 'rabbitmq';
  /** What clients use: DATABASE_URL, REDIS_URL, KAFKA_BROKERS, NATS_URL or RABBITMQ_URL. */
  readonly url: string;
  readonly home: string;
  readonly dataDir: string;
  readonly logFile: string;
  /** Starts it (or waits for it, if it runs) until it does real work. */
  start(timeoutMs?: number): Promise<void>;
  /** Graceful stop, as the stack's (SIGTERM; pg_ctl -m fast); no-op when not running. */
  stop(): Promise<void>;
  /** The server's pid when it runs. */
  pid(): Promise<number | undefined>;
  /** Sends a signal to the server process (SIGKILL, SIGSTOP, SIGCONT; SIGQUIT is PostgreSQL's immediate stop). */
  signal(signal: NodeJS.Signals): Promise<number>;
  /** After a signal that ends it: waits until the process is gone. */
  waitForExit(timeoutMs?: number): Promise<void>;
  /** Deletes the data (stopped servers only). */
  purge(): Promise<void>;
}

/**
 * `ports.tls` with `tls`: a SASL_SSL listener there (kafka.ts). `host` (default loopback) is the one address it
 * listens on and advertises: a test bridge's address makes it reachable from network namespaces.
 */
export function privateKafka(
  home: string,
  ports: { broker: number; controller: number; advertised?: number; tls?: number },
  properties = '',
  tls?: TlsMaterial,
  host = '127.0.0.1',
): PrivateServer {
  const paths = withSharedJars(stackPaths(home));
  const service = kafkaService(
    paths,
    {
      broker: { host, port: ports.broker },
      controller: { host, port: ports.controller },
      ...(ports.advertised ? { advertised: { host, port: ports.advertised } } : {}),
    },
    properties,
    tls && ports.tls ? { material: tls, port: ports.tls } : undefined,
  );
  return wrap(service, home);
}

export function privatePostgres(home: string, port: number, settings: string[] = [], tls?: TlsMaterial): PrivateServer {
  return wrap(postgresService(stackPaths(home), port, settings, tls), home);
}

/**
 * With `tls`: a TLS port as well, `tlsPort`, and the material's ACL user (redis.ts). With `alsoOn`: it listens on
 * that address too (a test bridge's).
 */
export function privateRedis(
  home: string,
  port: number,
  tls?: { material: TlsMaterial; port: number },
  alsoOn?: string,
): PrivateServer {
  return wrap(redisService(stackPaths(home), port, tls, alsoOn), home);
}

/** With `tls`: TLS required on its port (nats.ts). `host` (default loopback): the one address it listens on. */
export function privateNats(home: string, port: number, tls?: TlsMaterial, host?: string): PrivateServer {
  return wrap(natsService(stackPaths(home), port, tls, host), home);
}

/**
 * A private RabbitMQ node: its own AMQP, distribution and epmd ports (stop() also ends its epmd); with `amqpHost`
 * its AMQP listener on that address (rabbitmq.ts).
 */
export function privateRabbitmq(
  home: string,
  ports: { amqp: number; dist: number; epmd: number },
  tls?: { material: TlsMaterial; port: number },
  amqpHost?: string,
): PrivateServer {
  return wrap(rabbitmqService(stackPaths(home), ports, tls, amqpHost), home);
}

/** The jars are the stack's (downloaded once by `postbox stack up`), never a second copy. */
export function withSharedJars(paths: StackPaths): StackPaths {
  const shared = stackPaths(process.env.POSTBOX_HOME || defaultHome()).kafka;
  return {
    ...paths,
    kafka: {
      ...paths.kafka,
      libs: shared.libs,
      libsMarker: shared.libsMarker,
      pom: path.join(paths.kafka.dir, 'pom.xml'),
    },
  };
}

export function wrap(service: LocalService, home: string): PrivateServer {
  return {
    name: service.name,
    url: service.url,
    home,
    dataDir: service.dataDir,
    logFile: service.logFile,
    async start(timeoutMs = 120_000) {
      await fs.mkdir(home, { recursive: true });
      await ensureUp(service, timeoutMs);
    },
    async stop() {
      await ensureDown(service);
    },
    pid: () => service.ownedPid(),
    async signal(signal) {
      const pid = await service.ownedPid();
      if (pid === undefined)
        throw new Error(`private ${service.name} in ${home} is not running; read ${service.logFile}`);
      process.kill(pid, signal);
      return pid;
    },
    async waitForExit(timeoutMs = 30_000) {
      const pid = await service.ownedPid();
      if (pid !== undefined && isAlive(pid) && !(await waitForExit(pid, timeoutMs))) {
        throw new Error(`private ${service.name} (pid ${pid}) still runs after ${timeoutMs} ms`);
      }
    },
    purge: () => service.purge(),
  };
}
