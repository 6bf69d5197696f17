/**
 * The local stack: PostgreSQL, Redis and Kafka (and NATS with JetStream, when POSTBOX_BROKER=nats) for
 * development and tests, started as detached servers under `<home>` (env POSTBOX_HOME, else `<repo>/.postbox`)
 * so they outlive the command that started them.
 *
 * Each of DATABASE_URL, REDIS_URL, KAFKA_BROKERS and NATS_URL that is set (to anything but our own address)
 * points Postbox at an existing server: `up` then only checks that it answers and starts the rest. `down` stops
 * only servers whose pid file names a live process of ours, so it can never stop the machine's own PostgreSQL,
 * Redis or NATS.
 */
import fs from 'node:fs/promises';
import { redactUrl } from '@postbox/engine';
import { StackError } from './errors.ts';
import { withStackLock } from './lock.ts';
import { defaultHome, stackPaths } from './paths.ts';
import { kafkaService, kafkaTlsEnv, KAFKA_BROKERS, KAFKA_TLS_PORT } from './kafka.ts';
import { stackClusterIdFile } from './kafka-cluster.ts';
import {
  CLUSTER_SIZE,
  CLUSTER_URL,
  clusterServices,
  isClusterNode,
  kafkaBrokerCount,
  label,
  onePerCluster,
  runningClusterSize,
} from './stack-cluster.ts';
import { natsService, NATS_URL } from './nats.ts';
import { rabbitmqService, RABBITMQ_URL } from './rabbitmq.ts';
import { canConnect, formatAddress, waitUntil } from './ports.ts';
import { postgresAnswers, postgresService, postgresTlsUrl, POSTGRES_PORT, POSTGRES_URL } from './postgres.ts';
import { redisService, redisTlsUrl, REDIS_TLS_PORT, REDIS_URL } from './redis.ts';
import { ensureDown, ensureUp, localStatus, type LocalService } from './service.ts';
import { answers } from './service-answers.ts';
import { ensureTlsMaterial, readTlsMaterial, tlsDir, type TlsMaterial } from './tls.ts';

export { StackError, type StackErrorCode } from './errors.ts';
export {
  privateKafka,
  privateNats,
  privatePostgres,
  privateRabbitmq,
  privateRedis,
  type PrivateServer,
} from './private.ts';
export {
  privateKafkaCluster,
  type PartitionHealth,
  type ClusterNodeHost,
  type PrivateClusterNode,
  type PrivateClusterOptions,
  type PrivateKafkaCluster,
} from './private-cluster.ts';
export { freePort } from './ports.ts';
export { natsAnswers, natsPermissionsFile, natsTlsUrl } from './nats.ts';
export {
  ensureTlsMaterial,
  issueServerCertificate,
  makeCertificateAuthority,
  readTlsMaterial,
  TLS_HOST,
  type CertificateAuthority,
  type TlsMaterial,
} from './tls.ts';
export { postgresTlsUrl } from './postgres.ts';
export { redisTlsUrl } from './redis.ts';
export { kafkaTlsEnv } from './kafka.ts';
export { rabbitmqAnswers, rabbitmqctlScript, rabbitmqTlsUrl, stopEpmd } from './rabbitmq.ts';

export interface StackEnv {
  DATABASE_URL: string;
  REDIS_URL: string;
  KAFKA_BROKERS: string;
  /** Used when POSTBOX_BROKER=nats. */
  NATS_URL: string;
  /** Used when POSTBOX_BROKER=rabbitmq. */
  RABBITMQ_URL: string;
}

const DEFAULTS: StackEnv = { DATABASE_URL: POSTGRES_URL, REDIS_URL, KAFKA_BROKERS, NATS_URL, RABBITMQ_URL };

/** The brokers the local stack can run; POSTBOX_BROKER picks one. */
export const STACK_BROKERS = ['kafka', 'nats', 'rabbitmq'] as const;
export type StackBroker = (typeof STACK_BROKERS)[number];

/** POSTBOX_BROKER, checked: unset means kafka; anything else must be one the stack can run. */
export function chosenBroker(env: NodeJS.ProcessEnv = process.env): StackBroker {
  const value = env.POSTBOX_BROKER?.trim().toLowerCase() || 'kafka';
  if ((STACK_BROKERS as readonly string[]).includes(value)) return value as StackBroker;
  throw new StackError(
    'bad_config',
    `POSTBOX_BROKER=${JSON.stringify(env.POSTBOX_BROKER)} is not a broker the stack can run: use ${STACK_BROKERS.slice(0, -1).join(', ')} or ${STACK_BROKERS.at(-1)}`,
  );
}

/** How long `up` waits for one server to answer after starting it (the Kafka jar download is not included). */
const START_TIMEOUT_MS = 90_000;
/** How long `up` retries an external server (one named by an env var) before calling it down. */
const EXTERNAL_TIMEOUT_MS = 10_000;
/** A cold `up` may spend minutes in mvn; a second caller waits for it rather than racing it. */
const LOCK_TIMEOUT_MS = 15 * 60_000;

/** The env vars when set, else the local stack's addresses. */
export function stackEnv(): StackEnv {
  return {
    DATABASE_URL: process.env.DATABASE_URL || DEFAULTS.DATABASE_URL,
    REDIS_URL: process.env.REDIS_URL || DEFAULTS.REDIS_URL,
    KAFKA_BROKERS: process.env.KAFKA_BROKERS || DEFAULTS.KAFKA_BROKERS,
    NATS_URL: process.env.NATS_URL || DEFAULTS.NATS_URL,
    RABBITMQ_URL: process.env.RABBITMQ_URL || DEFAULTS.RABBITMQ_URL,
  };
}

/** stackEnv(), with the cluster's three addresses as KAFKA_BROKERS when the stack runs one (and none is set). */
function stackEnvFor(brokers: number): StackEnv {
  const env = stackEnv();
  return brokers > 1 && !process.env.KAFKA_BROKERS ? { ...env, KAFKA_BROKERS: CLUSTER_URL } : env;
}

/**
 * Starts what is not running. `tls`: makes the stack's TLS material first (once) and restarts a running server
 * that does not serve TLS yet; once made, the material stays in use by every later `up` (until `down --purge`).
 * `kafkaBrokers` 3: a KRaft cluster of three nodes (kafka-1..3, one cluster id in <home>/kafka-cluster.id) instead
 * of the single broker; it has no TLS listener, so `tls` is refused with it.
 */
export async function stackUp(
  opts: { quiet?: boolean; log?: (line: string) => void; tls?: boolean; kafkaBrokers?: number } = {},
): Promise<StackEnv> {
  const log = opts.quiet ? () => {} : (opts.log ?? console.log);
  const brokers = kafkaBrokerCount(opts.kafkaBrokers);
  if (brokers > 1 && opts.tls)
    throw new StackError(
      'bad_config',
      `--tls goes with one Kafka broker only: the ${brokers}-broker cluster has no TLS listeners; drop --tls or --kafka-brokers`,
    );
  const env = stackEnvFor(brokers);
  const material = opts.tls ? await ensureTlsMaterial(tlsDir(home())) : await readTlsMaterial(tlsDir(home()));
  // PostgreSQL and Redis keep TLS made by an earlier `up --tls`; the cluster's nodes have no TLS listener.
  const services = localServices({ kafkaBrokers: brokers }, material);
  if (opts.tls)
    await restartWithoutTls(
      services.filter((s) => !isExternal(s)),
      log,
    );
  // A cluster named by KAFKA_BROKERS is checked once, not once per node.
  const external = services.filter((s) => isExternal(s) && onePerCluster(s));
  const local = services.filter((s) => !isExternal(s));
  if (local.length === 0)
    log('DATABASE_URL, REDIS_URL and KAFKA_BROKERS are set: starting nothing, checking they answer');

  // Every missing program is named before anything starts, rather than one per run after a long wait.
  const notRunning = [];
  for (const service of local) if ((await service.ownedPid()) === undefined) notRunning.push(service);
  throwAll(await Promise.allSettled(notRunning.map((s) => s.checkPrerequisites())));

  const work = external.map((service) => checkExternal(service, env[service.envVar], log));
  if (local.length > 0) work.push(withStackLock(homeLockDir(), LOCK_TIMEOUT_MS, () => startLocal(local, log)));
  throwAll(await Promise.allSettled(work));
  return env;
}

async function startLocal(services: LocalService[], log: (line: string) => void): Promise<void> {
  const results = await Promise.allSettled(
    services.map(async (service) => {
      const { state, pid } = await ensureUp(service, START_TIMEOUT_MS);
      const detail = state === 'started' ? `(data: ${service.dataDir})` : `(pid ${pid}, data: ${service.dataDir})`;
      log(line(label(service), state, formatAddress(service.address), detail));
    }),
  );
  throwAll(results);
}

async function checkExternal(service: LocalService, target: string, log: (line: string) => void): Promise<void> {
  try {
    await waitUntil(() => answers(service, target), {
      what: `${service.envVar} is set, but ${service.name} at ${redactUrl(target)} does not answer`,
      hint: `unset ${service.envVar} to let Postbox start its own`,
      timeoutMs: EXTERNAL_TIMEOUT_MS,
      intervalMs: 500,
    });
  } catch (err) {
    throw new StackError('not_answering', (err as Error).message, { cause: (err as Error).cause ?? err });
  }
  log(line(label(service), 'external', redactUrl(target), `(from ${service.envVar})`));
}

/** A running server of ours started before the TLS material existed is stopped here, so `up` starts it with TLS. */
async function restartWithoutTls(services: LocalService[], log: (line: string) => void): Promise<void> {
  for (const service of services) {
    if ((await service.ownedPid()) === undefined || (await servesTls(service))) continue;
    log(line(service.name, 'restarting', formatAddress(service.address), '(to serve TLS)'));
    await ensureDown(service);
  }
}

async function servesTls(service: LocalService): Promise<boolean> {
  switch (service.name) {
    case 'redis':
      return canConnect({ host: '127.0.0.1', port: REDIS_TLS_PORT });
    case 'kafka':
      return canConnect({ host: '127.0.0.1', port: KAFKA_TLS_PORT });
    case 'postgres': {
      const material = await readTlsMaterial(tlsDir(home()));
      return material
        ? postgresAnswers(postgresTlsUrl(service.address.port, material)).then(
            () => true,
            () => false,
          )
        : false;
    }
    default:
      return true;
  }
}

/** What a client sets to reach the stack over TLS only (the stack's material must exist). */
export async function stackTlsEnv(): Promise<Record<string, string> | undefined> {
  const material = await readTlsMaterial(tlsDir(home()));
  if (!material) return undefined;
  return {
    DATABASE_URL: postgresTlsUrl(POSTGRES_PORT, material),
    REDIS_URL: redisTlsUrl(REDIS_TLS_PORT, material),
    ...kafkaTlsEnv(KAFKA_TLS_PORT, material),
  };
}

export async function stackDown(opts: { purge?: boolean; log?: (line: string) => void } = {}): Promise<void> {
  const log = opts.log ?? console.log;
  await withStackLock(homeLockDir(), LOCK_TIMEOUT_MS, async () => {
    throwAll(
      await Promise.allSettled(
        localServices({ everyBroker: true }).map(async (service) => {
          const pid = await ensureDown(service);
          if (opts.purge) await service.purge();
          // A home that never ran a cluster hears nothing about one.
          if (pid === undefined && !opts.purge && isClusterNode(service)) return;
          const what = pid === undefined ? 'not running' : 'stopped';
          const notes = [pid === undefined ? '' : `pid ${pid}`, opts.purge ? `deleted ${service.dataDir}` : ''];
          const detail = notes.some(Boolean) ? `(${notes.filter(Boolean).join(', ')})` : '';
          log(line(label(service), what, formatAddress(service.address), detail));
        }),
      ),
    );
    if (opts.purge) {
      await fs.rm(tlsDir(home()), { recursive: true, force: true });
      await fs.rm(stackClusterIdFile(stackPaths(home())), { force: true });
    }
  });
}

/**
 * Each server and the env to export. `kafkaBrokers` unsaid: the cluster's nodes when one of them runs (after
 * `up --kafka-brokers 3`), else the single broker.
 */
export async function stackStatus(opts: { kafkaBrokers?: number } = {}): Promise<{
  services: Array<{ name: string; running: boolean; pid?: number; address: string }>;
  env: StackEnv;
}> {
  const brokers =
    opts.kafkaBrokers === undefined
      ? await runningClusterSize(stackPaths(home()))
      : kafkaBrokerCount(opts.kafkaBrokers);
  const env = stackEnvFor(brokers);
  const services = await Promise.all(
    localServices({ kafkaBrokers: brokers }).map(async (service) => {
      if (isExternal(service)) {
        const target = env[service.envVar];
        const running = await answers(service, target).then(
          () => true,
          () => false,
        );
        return { name: label(service), running, address: redactUrl(target) };
      }
      return { name: label(service), ...(await localStatus(service)), address: formatAddress(service.address) };
    }),
  );
  return { services, env };
}

/**
 * The servers `up` starts: PostgreSQL, Redis, Kafka (one broker, or the nodes of a `kafkaBrokers` cluster), and
 * NATS when POSTBOX_BROKER=nats. Kafka stays in every set until the relay and consumers select their broker end to
 * end. `down` stops every broker of ours that runs — the single one and a cluster's nodes — whatever POSTBOX_BROKER
 * says now.
 */
function localServices(
  options: { everyBroker?: boolean; kafkaBrokers?: number } = {},
  tls?: TlsMaterial,
): LocalService[] {
  const paths = stackPaths(home());
  const brokers = options.kafkaBrokers ?? 1;
  const services: LocalService[] = [
    postgresService(paths, undefined, [], tls),
    redisService(paths, undefined, tls ? { material: tls, port: REDIS_TLS_PORT } : undefined),
  ];
  if (brokers === 1 || options.everyBroker)
    services.push(kafkaService(paths, undefined, '', tls ? { material: tls, port: KAFKA_TLS_PORT } : undefined));
  if (brokers > 1 || options.everyBroker) services.push(...clusterServices(paths, CLUSTER_SIZE));
  if (options.everyBroker || chosenBroker() === 'nats') services.push(natsService(paths));
  if (options.everyBroker || chosenBroker() === 'rabbitmq') services.push(rabbitmqService(paths));
  return services;
}

function home(): string {
  return process.env.POSTBOX_HOME || defaultHome();
}

function homeLockDir(): string {
  return stackPaths(home()).lockDir;
}

/** Set to our own address (say after `export $(postbox stack status | grep =)`) still means "ours, manage it". */
function isExternal(service: LocalService): boolean {
  const value = process.env[service.envVar];
  return Boolean(value) && value !== service.url;
}

function line(name: string, state: string, address: string, detail: string): string {
  return [name.padEnd(8), state.padEnd(15), address.padEnd(15), detail].join('  ').trimEnd();
}

/** Every service is tried even when one fails; then one error says what went wrong with each. */
function throwAll(results: PromiseSettledResult<unknown>[]): void {
  const errors = results.flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []));
  if (errors.length === 1) throw errors[0];
  if (errors.length > 1) {
    const message = errors.map((e) => (e instanceof Error ? e.message : String(e))).join('\n');
    throw new StackError(
      errors.every((e) => e instanceof StackError && e.code === 'prerequisite_missing')
        ? 'prerequisite_missing'
        : 'start_failed',
      message,
      { cause: new AggregateError(errors) },
    );
  }
}
