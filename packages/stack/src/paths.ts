import { fileURLToPath } from 'node:url';
import path from 'node:path';

/** Where every file of the local stack lives. Everything is under one home so `down --purge` is one place. */
export interface StackPaths {
  home: string;
  pg: { dir: string; data: string; log: string; pidFile: string };
  redis: { dir: string; pidFile: string; log: string };
  nats: { dir: string; store: string; config: string; pidFile: string; log: string };
  rabbitmq: {
    dir: string;
    home: string;
    data: string;
    logs: string;
    config: string;
    plugins: string;
    pidFile: string;
    log: string;
  };
  kafka: {
    dir: string;
    pom: string;
    libs: string;
    libsMarker: string;
    data: string;
    metaProperties: string;
    serverProperties: string;
    log4jProperties: string;
    log: string;
    stdoutLog: string;
    pidFile: string;
  };
  lockDir: string;
}

/** `<repo root>/.postbox`, found from this file so it does not depend on the caller's working directory. */
export function defaultHome(): string {
  const repoRoot = fileURLToPath(new URL('../../../', import.meta.url));
  return path.join(repoRoot, '.postbox');
}

export function stackPaths(home: string): StackPaths {
  const pg = path.join(home, 'pg');
  const redis = path.join(home, 'redis');
  const kafka = path.join(home, 'kafka');
  const nats = path.join(home, 'nats');
  const rabbitmq = path.join(home, 'rabbitmq');
  return {
    home,
    pg: {
      dir: pg,
      data: path.join(pg, 'data'),
      log: path.join(pg, 'postgres.log'),
      // PostgreSQL writes and removes its own pid file; we read it rather than keep a second one.
      pidFile: path.join(pg, 'data', 'postmaster.pid'),
    },
    redis: {
      dir: redis,
      pidFile: path.join(redis, 'redis.pid'),
      log: path.join(redis, 'redis.log'),
    },
    nats: {
      dir: nats,
      store: path.join(nats, 'jetstream'),
      config: path.join(nats, 'nats.conf'),
      pidFile: path.join(nats, 'nats.pid'),
      log: path.join(nats, 'nats.log'),
    },
    rabbitmq: {
      dir: rabbitmq,
      // The node's HOME: its Erlang cookie lives there, never in the machine's.
      home: path.join(rabbitmq, 'home'),
      data: path.join(rabbitmq, 'mnesia'),
      logs: path.join(rabbitmq, 'logs'),
      config: path.join(rabbitmq, 'rabbitmq.conf'),
      plugins: path.join(rabbitmq, 'enabled_plugins'),
      pidFile: path.join(rabbitmq, 'rabbitmq.pid'),
      log: path.join(rabbitmq, 'rabbitmq.out'),
    },
    kafka: {
      dir: kafka,
      pom: path.join(kafka, 'pom.xml'),
      libs: path.join(kafka, 'libs'),
      libsMarker: path.join(kafka, 'libs', '.postbox-kafka-version'),
      data: path.join(kafka, 'data'),
      metaProperties: path.join(kafka, 'data', 'meta.properties'),
      serverProperties: path.join(kafka, 'server.properties'),
      log4jProperties: path.join(kafka, 'log4j.properties'),
      log: path.join(kafka, 'kafka.log'),
      stdoutLog: path.join(kafka, 'kafka.out'),
      pidFile: path.join(kafka, 'kafka.pid'),
    },
    lockDir: path.join(home, 'stack.lock'),
  };
}
