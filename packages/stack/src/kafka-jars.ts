import fs from 'node:fs/promises';
import path from 'node:path';
import { StackError } from './errors.ts';
import { requireExecutable } from './prerequisites.ts';
import { run } from './process.ts';
import type { StackPaths } from './paths.ts';

/** 3.9.x: kafkajs still speaks its protocol versions (Kafka 4.0 removed old ones, KIP-896). */
const KAFKA_VERSION = '3.9.1';

/** One download per jar directory at a time: the nodes of a cluster start together and share the jars. */
const downloads = new Map<string, Promise<void>>();

export function ensureJars(paths: StackPaths): Promise<void> {
  let download = downloads.get(paths.kafka.libs);
  if (!download) {
    download = (async () => {
      if (!(await jarsCached(paths))) await downloadJars(paths);
    })().finally(() => downloads.delete(paths.kafka.libs));
    downloads.set(paths.kafka.libs, download);
  }
  return download;
}

export async function jarsCached({ kafka }: StackPaths): Promise<boolean> {
  const marker = await fs.readFile(kafka.libsMarker, 'utf8').catch(() => '');
  return marker.trim() === KAFKA_VERSION;
}

/** The broker's jars from Maven Central, once; the marker is written last so an interrupted download repeats. */
async function downloadJars({ kafka }: StackPaths): Promise<void> {
  const mvn = await requireExecutable('mvn');
  await fs.rm(kafka.libs, { recursive: true, force: true });
  // A cluster's nodes live in kafka-<i>/: the single broker's directory, which holds the jars, may not exist yet.
  await fs.mkdir(path.dirname(kafka.pom), { recursive: true });
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
