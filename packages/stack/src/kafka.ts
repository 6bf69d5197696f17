import fs from 'node:fs/promises';
import kafkajs from 'kafkajs';
import { StackError } from './errors.ts';
import { canConnect, formatAddress, type HostPort } from './ports.ts';
import { requireExecutable, requireExecutables } from './prerequisites.ts';
import { fileExists, ownedPid, run, spawnDetached, terminate } from './process.ts';
import type { StackPaths } from './paths.ts';
import type { LocalService } from './service.ts';

/** 3.9.x: kafkajs still speaks its protocol versions (Kafka 4.0 removed old ones, KIP-896). */
const KAFKA_VERSION = '3.9.1';
const ADDRESS: HostPort = { host: '127.0.0.1', port: 19092 };
const CONTROLLER: HostPort = { host: '127.0.0.1', port: 19093 };

export const KAFKA_BROKERS = formatAddress(ADDRESS);

/** Where a broker listens; `advertised` (default: the listener) is the address clients are told to use. */
export interface KafkaPorts {
  broker: HostPort;
  controller: HostPort;
  advertised?: HostPort;
}

/**
 * The stack's broker; a private one (stack/private.ts) passes its own paths, ports and extra server properties.
 */
export function kafkaService(
  paths: StackPaths,
  ports: KafkaPorts = { broker: ADDRESS, controller: CONTROLLER },
  extraProperties = '',
): LocalService {
  const { kafka } = paths;
  const url = formatAddress(ports.advertised ?? ports.broker);
  const classpath = `${kafka.libs}/*`;
  const log4j = `-Dlog4j.configuration=file:${kafka.log4jProperties}`;
  return {
    name: 'kafka',
    address: ports.broker,
    otherPorts: [ports.controller],
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
      if (!(await jarsCached(paths))) await downloadJars(paths);
      await fs.writeFile(kafka.serverProperties, serverProperties(paths, ports, extraProperties));
      await fs.writeFile(kafka.log4jProperties, log4jProperties(paths));
      if (!(await fileExists(kafka.metaProperties))) {
        const tool = [log4j, '-cp', classpath, 'kafka.tools.StorageTool'];
        const { stdout } = await run(java, [...tool, 'random-uuid'], { timeoutMs: 60_000 });
        const clusterId = stdout.trim().split('\n').at(-1) ?? '';
        await run(java, [...tool, 'format', '-t', clusterId, '-c', kafka.serverProperties], {
          timeoutMs: 60_000,
        }).catch((err: unknown) => {
          throw new StackError('start_failed', `kafka storage format of ${kafka.data} failed`, { cause: err });
        });
      }
      const pid = spawnDetached(
        java,
        [
          '-Xms256m',
          '-Xmx768m',
          '-XX:+UseG1GC',
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
    ready: () => kafkaAnswers([url]),
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
    if (cluster.brokers.length === 0) throw new Error(`kafka at ${brokers.join(',')} lists no live broker yet`);
  } finally {
    await admin.disconnect();
  }
}

async function jarsCached({ kafka }: StackPaths): Promise<boolean> {
  const marker = await fs.readFile(kafka.libsMarker, 'utf8').catch(() => '');
  return marker.trim() === KAFKA_VERSION;
}

/** The broker's jars from Maven Central, once; the marker is written last so an interrupted download repeats. */
async function downloadJars({ kafka }: StackPaths): Promise<void> {
  const mvn = await requireExecutable('mvn');
  await fs.rm(kafka.libs, { recursive: true, force: true });
  await fs.writeFile(kafka.pom, pom());
  await run(
    mvn,
    [
      '-q',
      '-B',
      '-f',
      kafka.pom,
      'dependency:copy-dependencies',
      `-DoutputDirectory=${kafka.libs}`,
      '-DincludeScope=runtime',
    ],
    { cwd: kafka.dir, timeoutMs: 10 * 60_000 },
  ).catch((err: unknown) => {
    throw new StackError('start_failed', `downloading Kafka ${KAFKA_VERSION} jars with mvn failed`, { cause: err });
  });
  await fs.writeFile(kafka.libsMarker, `${KAFKA_VERSION}\n`);
}

function pom(): string {
  return `<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by \`postbox stack up\`: only used to fetch the Kafka broker's jars into ./libs. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.postbox.stack</groupId>
  <artifactId>kafka-libs</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>${KAFKA_VERSION}</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-reload4j</artifactId>
      <version>1.7.36</version>
    </dependency>
  </dependencies>
</project>
`;
}

function serverProperties({ kafka }: StackPaths, ports: KafkaPorts, extra: string): string {
  return `# Written by \`postbox stack up\` on every start; edit kafka.ts instead.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@${formatAddress(ports.controller)}
listeners=PLAINTEXT://${formatAddress(ports.broker)},CONTROLLER://${formatAddress(ports.controller)}
advertised.listeners=PLAINTEXT://${formatAddress(ports.advertised ?? ports.broker)}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=${kafka.data}
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
# Postbox creates its topics explicitly; a typo must fail, not create a topic.
auto.create.topics.enable=false
group.initial.rebalance.delay.ms=0
num.partitions=1
# 2 MiB, above Postbox's 1 MiB envelope limit, so the envelope check is the one that fires.
message.max.bytes=2097152
${extra}`;
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
