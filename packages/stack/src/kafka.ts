import fs from 'node:fs/promises';
import kafkajs from 'kafkajs';
import { redactUrl } from '@postbox/engine';
import { StackError } from './errors.ts';
import { canConnect, formatAddress, type HostPort } from './ports.ts';
import { requireExecutable, requireExecutables } from './prerequisites.ts';
import { fileExists, ownedPid, run, spawnDetached, terminate } from './process.ts';
import { ensureJars, jarsCached } from './kafka-jars.ts';
import type { StackPaths } from './paths.ts';
import type { LocalService } from './service.ts';
import { createHash } from 'node:crypto';
import path from 'node:path';
import { TLS_HOST, type KafkaRoleUser, type TlsMaterial } from './tls.ts';
import {
  clusterIdOf,
  CLUSTER_JVM_OPTIONS,
  kafkaNodeAnswers,
  replicationProperties,
  type KafkaClusterNode,
} from './kafka-cluster.ts';

const ADDRESS: HostPort = { host: '127.0.0.1', port: 19092 };
const CONTROLLER: HostPort = { host: '127.0.0.1', port: 19093 };

export const KAFKA_BROKERS = formatAddress(ADDRESS);
/** The stack's SASL_SSL listener (`up --tls`). */
export const KAFKA_TLS_PORT = 19094;

/** Where a broker listens; `advertised` (default: the listener) is the address clients are told to use. */
export interface KafkaPorts {
  broker: HostPort;
  controller: HostPort;
  advertised?: HostPort;
}

/**
 * The stack's broker; a private one (stack/private.ts) passes its own paths, ports and extra server properties.
 * With TLS material it also has a SASL_SSL listener on `tls.port` (SCRAM-SHA-256, the material's user, advertised
 * as the certificate's host name); the controller and the broker's own traffic stay on their plain listeners.
 * With `node` it is one node of a cluster (kafka-cluster.ts): its id, the shared voters and cluster id, replicated
 * internal topics and smaller JVMs; `paths` are then the node's own (kafkaNodePaths).
 */
export function kafkaService(
  paths: StackPaths,
  ports: KafkaPorts = { broker: ADDRESS, controller: CONTROLLER },
  extraProperties = '',
  tls?: { material: TlsMaterial; port: number },
  node?: KafkaClusterNode,
): LocalService {
  const { kafka } = paths;
  const keystore = path.join(kafka.dir, 'keystore.pem');
  const scramMarker = path.join(kafka.data, '.postbox-scram');
  const url = formatAddress(ports.advertised ?? ports.broker);
  const classpath = `${kafka.libs}/*`;
  const log4j = `-Dlog4j.configuration=file:${kafka.log4jProperties}`;
  return {
    name: 'kafka',
    address: ports.broker,
    otherPorts: [ports.controller, ...(tls ? [{ host: ports.broker.host, port: tls.port }] : [])],
    envVar: 'KAFKA_BROKERS',
    url,
    dataDir: kafka.data,
    logFile: kafka.log,
    mayRemovePidFile: true,
    pidFile: kafka.pidFile,
    // Our broker's command line names our server.properties: that tells it from any other JVM.
    ownedPid: () => ownedPid(kafka.pidFile, kafka.serverProperties),
    checkPrerequisites: async () => {
      await requireExecutables((await jarsCached(paths)) ? ['java'] : ['java', 'mvn']);
    },
    start: async () => {
      const java = await requireExecutable('java');
      await fs.mkdir(kafka.data, { recursive: true });
      await ensureJars(paths);
      const listener = tls ? tlsListener(tls.port, keystore, tls.material) : '';
      if (tls) await writeKeystore(tls.material, keystore);
      await fs.writeFile(kafka.serverProperties, serverProperties(paths, ports, extraProperties, listener, node));
      await fs.writeFile(kafka.log4jProperties, log4jProperties(paths));
      if (!(await fileExists(kafka.metaProperties))) {
        const tool = [log4j, '-cp', classpath, 'kafka.tools.StorageTool'];
        const clusterId = node
          ? await clusterIdOf(node.clusterIdFile)
          : ((await run(java, [...tool, 'random-uuid'], { timeoutMs: 60_000 })).stdout.trim().split('\n').at(-1) ?? '');
        // A new cluster gets the SCRAM user in its first metadata (KIP-900); an existing one in ready().
        const scram = tls ? scramUsers(tls.material).flatMap((u) => ['--add-scram', scramCredential(u)]) : [];
        await run(java, [...tool, 'format', '-t', clusterId, '-c', kafka.serverProperties, ...scram], {
          timeoutMs: 60_000,
        }).catch((err: unknown) => {
          throw new StackError('start_failed', `kafka storage format of ${kafka.data} failed`, { cause: err });
        });
        if (tls) await fs.writeFile(scramMarker, scramFingerprint(tls.material));
      }
      const pid = spawnDetached(
        java,
        [
          ...(node ? CLUSTER_JVM_OPTIONS : ['-Xms256m', '-Xmx768m', '-XX:+UseG1GC']),
          '-Djava.awt.headless=true',
          log4j,
          '-cp',
          classpath,
          'kafka.Kafka',
          kafka.serverProperties,
        ],
        kafka.stdoutLog,
        { cwd: kafka.dir },
      );
      await fs.writeFile(kafka.pidFile, `${pid}\n`);
    },
    ready: async () => {
      await (node ? kafkaNodeAnswers(url, node.id) : kafkaAnswers([url]));
      if (tls) await ensureScramUser(tls.material, url, classpath, log4j, scramMarker);
    },
    stop: async (pid) => {
      // A KRaft broker's controlled shutdown usually takes a few seconds; 30 s before SIGKILL.
      await terminate(pid, 30_000);
    },
    purge: async () => {
      await fs.rm(kafka.data, { recursive: true, force: true });
      for (const file of [kafka.log, kafka.stdoutLog, kafka.serverProperties, kafka.log4jProperties]) {
        await fs.rm(file, { force: true });
      }
    },
  };
}

/**
 * Resolves once a broker serves metadata and lists itself as alive. A KRaft broker accepts TCP before it is
 * unfenced, and topic creation fails until it is, so an open port is not enough.
 */
export async function kafkaAnswers(brokers: string[]): Promise<void> {
  const [first] = brokers;
  if (first) {
    const [host = '127.0.0.1', port = '9092'] = first.split(':');
    if (!(await canConnect({ host, port: Number(port) }))) throw new Error(`nothing listens on ${first}`);
  }
  const client = new kafkajs.Kafka({
    clientId: 'postbox-stack',
    brokers,
    logLevel: kafkajs.logLevel.NOTHING,
    connectionTimeout: 2000,
    requestTimeout: 5000,
    retry: { retries: 0 },
  });
  const admin = client.admin();
  try {
    await admin.connect();
    await admin.listTopics();
    const cluster = await admin.describeCluster();
    if (cluster.brokers.length === 0)
      throw new Error(`kafka at ${redactUrl(brokers.join(','))} lists no live broker yet`);
  } finally {
    await admin.disconnect();
  }
}

/** The SASL_SSL listener's lines (server.properties), or none. */
interface TlsListener {
  listener: string;
  advertised: string;
  properties: string;
}

/**
 * The SASL_SSL listener, with the authorizer on: a SCRAM user may do only what its ACLs allow. The super users are
 * the material's admin user (it grants the ACLs) and ANONYMOUS — the plain listeners, which the controller and
 * the broker's own traffic use, bound to loopback only; a deployment that must hold every client to ACLs puts its
 * every listener behind SASL.
 */
function tlsListener(port: number, keystore: string, material: TlsMaterial): TlsListener {
  return {
    listener: `,SASL_SSL://127.0.0.1:${port}`,
    advertised: `,SASL_SSL://${TLS_HOST}:${port}`,
    // The JAAS line names no user: SCRAM checks against the credentials in the cluster's metadata.
    properties: `listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-256
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location=${keystore}
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS;User:${material.kafka.username}
`,
  };
}

/** Every SCRAM user of the material: the admin, then one per broker role. */
function scramUsers(material: TlsMaterial): Array<{ username: string; password: string }> {
  return [material.kafka, ...Object.values(material.kafkaRoles)];
}

function serverProperties(
  { kafka }: StackPaths,
  ports: KafkaPorts,
  extra: string,
  tls: TlsListener | '',
  node: KafkaClusterNode | undefined,
): string {
  return `# Written by \`postbox stack up\` on every start; edit kafka.ts instead.
process.roles=broker,controller
node.id=${node?.id ?? 1}
controller.quorum.voters=${node?.voters ?? `1@${formatAddress(ports.controller)}`}
listeners=PLAINTEXT://${formatAddress(ports.broker)},CONTROLLER://${formatAddress(ports.controller)}${tls ? tls.listener : ''}
advertised.listeners=PLAINTEXT://${formatAddress(ports.advertised ?? ports.broker)}${tls ? tls.advertised : ''}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT${tls ? ',SASL_SSL:SASL_SSL' : ''}
${tls ? tls.properties : ''}log.dirs=${kafka.data}
${replicationProperties(node)}# Postbox creates its topics explicitly; a typo must fail, not create a topic.
auto.create.topics.enable=false
group.initial.rebalance.delay.ms=0
num.partitions=1
# 2 MiB, above Postbox's 1 MiB envelope limit, so the envelope check is the one that fires.
message.max.bytes=2097152
${extra}`;
}

/** Kafka's PEM keystore: the PKCS#8 key, the certificate, then the CA that signed it. */
async function writeKeystore(tls: TlsMaterial, file: string): Promise<void> {
  const parts = await Promise.all([tls.keyFile, tls.certFile, tls.caFile].map((f) => fs.readFile(f, 'utf8')));
  await fs.writeFile(file, parts.join(''), { mode: 0o600 });
}

function scramCredential(user: { username: string; password: string }): string {
  return `SCRAM-SHA-256=[name=${user.username},password=${user.password}]`;
}

function scramFingerprint(tls: TlsMaterial): string {
  return createHash('sha256')
    .update(
      scramUsers(tls)
        .map((u) => `${u.username}:${u.password}`)
        .join('\n'),
    )
    .digest('hex');
}

/**
 * A cluster formatted before TLS was turned on (or before the role users existed) learns the SCRAM users through
 * the admin API (ConfigCommand, over the plain listener) once; a marker in its data directory says it has them.
 */
async function ensureScramUser(
  tls: TlsMaterial,
  bootstrap: string,
  classpath: string,
  log4j: string,
  marker: string,
): Promise<void> {
  if ((await fs.readFile(marker, 'utf8').catch(() => '')) === scramFingerprint(tls)) return;
  const java = await requireExecutable('java');
  for (const user of scramUsers(tls)) {
    const config = `SCRAM-SHA-256=[iterations=8192,password=${user.password}]`;
    const args = ['--bootstrap-server', bootstrap, '--alter', '--add-config', config];
    await run(
      java,
      [
        log4j,
        '-cp',
        classpath,
        'kafka.admin.ConfigCommand',
        ...args,
        '--entity-type',
        'users',
        '--entity-name',
        user.username,
      ],
      {
        timeoutMs: 60_000,
      },
    ).catch((err: unknown) => {
      throw new StackError('start_failed', `adding the SCRAM user ${user.username} to kafka failed`, { cause: err });
    });
  }
  await fs.writeFile(marker, scramFingerprint(tls));
}

/**
 * The client settings of the SASL_SSL listener, as Postbox's environment variables: the admin user's, or with
 * `role` that role's own user (held to the ACLs `postbox migrate --broker-acls` grants).
 */
export function kafkaTlsEnv(port: number, tls: TlsMaterial, role?: KafkaRoleUser): Record<string, string> {
  const user = role ? tls.kafkaRoles[role] : tls.kafka;
  return {
    KAFKA_BROKERS: `${TLS_HOST}:${port}`,
    KAFKA_SSL: 'true',
    KAFKA_SSL_CA: tls.caFile,
    KAFKA_SASL_MECHANISM: 'scram-sha-256',
    KAFKA_SASL_USERNAME: user.username,
    KAFKA_SASL_PASSWORD: user.password,
  };
}

function log4jProperties({ kafka }: StackPaths): string {
  return `# Written by \`postbox stack up\`.
log4j.rootLogger=WARN, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File=${kafka.log}
log4j.appender.file.Append=true
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
`;
}
