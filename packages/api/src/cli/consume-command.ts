import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { ConfigError, connect, createLogger, type ConsumerDefinition, type Logger } from '@postbox/engine';
import type { TopicSpec } from '@postbox/engine/kafka';
import type { Consumer } from '@postbox/engine/runtime';
import {
  awaitTopics,
  partitionCounts,
  startConsumer,
  startWhenReady,
  type ConsumerRuntimeOptions,
} from '@postbox/workers';
import { linkEnv, requireLink } from '../config/links.ts';
import { readConfig, type PostboxConfig } from '../config/env.ts';
import { migrateDemo } from '../demo/migrate-demo.ts';
import { DEMO_CONSUMER, demoProjectionConsumer } from '../demo/order-projection.ts';
import { startTelemetry } from '../telemetry/sdk.ts';
import { startPartitionRole } from './partition-role.ts';
import { StartInterrupted } from './role-set.ts';
import { runRoles } from './run-roles.ts';
import { checkLinks } from './link-check.ts';
import { shutdownSignal } from './signals.ts';

const HELP = `postbox consume — run consumers: broker → per-aggregate ordered, inbox-deduplicated handlers

usage: postbox consume [consumer ...]

A consumer is "${DEMO_CONSUMER}" (the demo projection of POSTBOX_TOPICS' first topic; the default) or the path of
a module whose default export is a consumer definition (defineConsumer(...)) or a list of them. Run as many
processes as you like: a consumer's partitions are shared through its Kafka consumer group (on NATS JetStream, by
leases in PostgreSQL).

Environment: DATABASE_URL, POSTBOX_BROKER (kafka | nats | rabbitmq), KAFKA_BROKERS, NATS_URL or RABBITMQ_URL,
POSTBOX_TOPICS (see README, Configuration). The topics of POSTBOX_TOPICS the consumers read are created if missing (as the relay does),
waiting for the broker to answer. POSTBOX_HEAP_MB: the main thread's heap (default 256; 0 = V8's).
Options:
  --threads N       worker threads per consumer (0 = on the main thread); overrides the definition
  --progress MS     print each consumer's counters as a JSON line every MS milliseconds
  -h, --help        this text
SIGINT/SIGTERM: stop fetching, finish in-flight batches, commit offsets, leave the group, exit.
On exit the final counters are printed as one JSON line per consumer ("consumer-stats" …).`;

export async function consumeCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { help: { type: 'boolean', short: 'h' }, threads: { type: 'string' }, progress: { type: 'string' } },
  });
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  const threads = values.threads === undefined ? undefined : Number(values.threads);
  if (threads !== undefined && (!Number.isInteger(threads) || threads < 0))
    throw new ConfigError(`--threads must be an integer ≥ 0, got "${values.threads}"`);
  const progressMs = values.progress === undefined ? 0 : Number(values.progress);
  if (!Number.isInteger(progressMs) || progressMs < 0)
    throw new ConfigError(`--progress must be milliseconds ≥ 0, got "${values.progress}"`);
  const config = readConfig(await linkEnv(), process.env, { role: 'consumer' });
  await checkLinks(config, ['postgres', 'broker', 'redis']);
  const log = createLogger({ level: config.logLevel, name: 'postbox' });
  await using _telemetry = await startTelemetry('consumer', { log });
  const signal = shutdownSignal();
  const definitions = await resolveConsumers(positionals.length > 0 ? positionals : [DEMO_CONSUMER], config);
  // The topics of POSTBOX_TOPICS these consumers read are made as the relay makes them, waiting for the broker:
  // a consumer started before the relay (or the broker) is up then starts anyway.
  const read = config.topics.filter((t) => definitions.some((d) => d.topics.includes(t.topic)));
  if (read.length > 0 && !(await awaitTopics({ broker: config.broker, topics: read, log, signal }))) return 0;
  if (definitions.some((d) => d.name === DEMO_CONSUMER)) await prepareDemo(config);
  const runtime = consumerRuntime(config, log, threads === 0);
  const consumers: Consumer[] = [];
  const stopped = async (c: Consumer) => {
    await c.stop();
    console.log(JSON.stringify({ 'consumer-stats': c.stats() }));
  };
  return runRoles(signal, log, async (roles) => {
    await startPartitionRole(roles, config, log);
    for (const definition of definitions) {
      consumers.push(
        await roles.start(
          `consumer ${definition.name}`,
          async () => {
            const what = `consumer ${definition.name}`;
            const start = () => startConsumer(withThreads(definition, threads), runtime);
            const consumer = await startWhenReady(what, start, { signal, log });
            if (!consumer) throw new StartInterrupted(what);
            return consumer;
          },
          stopped,
        ),
      );
    }
    console.log(
      `postbox consume: ${consumers.map((c) => `${c.definition.name} (${c.definition.topics.join(', ')})`).join('; ')}`,
    );
    if (progressMs > 0) {
      const print = () => consumers.forEach((c) => console.log(JSON.stringify({ 'consumer-progress': c.stats() })));
      await roles.start(
        'progress',
        async () => setInterval(print, progressMs),
        async (timer) => clearInterval(timer),
      );
    }
  });
}

/**
 * The consumer runtime's options from the resolved configuration; `topics` adds topics outside POSTBOX_TOPICS
 * (the demo saga's), whose partition counts RabbitMQ's queues need.
 */
export function consumerRuntime(
  config: PostboxConfig,
  log: Logger,
  inline = false,
  topics: TopicSpec[] = [],
): ConsumerRuntimeOptions {
  return {
    databaseUrl: config.databaseUrl,
    broker: config.broker,
    partitions: partitionCounts([...config.topics, ...topics]),
    redisUrl: config.redisUrl,
    retryReconcileMs: config.retryReconcileMs,
    payloadKeys: config.payloadKeys,
    inline,
    log,
    ...sessionTimeout(config),
    ...(config.kafkaHeartbeatMs === undefined ? {} : { heartbeatIntervalMs: config.kafkaHeartbeatMs }),
  };
}

/** How long a silent member keeps its partitions: Kafka's session timeout, or the partition lease (NATS, RabbitMQ). */
function sessionTimeout(config: PostboxConfig): { sessionTimeoutMs?: number } {
  const ms = config.broker.kind === 'kafka' ? config.kafkaSessionTimeoutMs : config.partitionLeaseMs;
  return ms === undefined ? {} : { sessionTimeoutMs: ms };
}

/** The demo projection writes the demo's own tables, on the demo's topic (made by the tables' owner). */
async function prepareDemo(config: PostboxConfig): Promise<void> {
  const owner = requireLink(
    { DATABASE_URL: config.ownerDatabaseUrl },
    'DATABASE_URL',
    "the tables' owner, for the demo's migrations",
  );
  const sql = connect({ url: owner, max: 1, applicationName: 'postbox-demo-migrate' });
  try {
    await migrateDemo(sql);
  } finally {
    await sql.end({ timeout: 5 });
  }
}

function withThreads(definition: ConsumerDefinition, threads: number | undefined): ConsumerDefinition {
  if (threads === undefined) return definition;
  return { ...definition, limits: { ...definition.limits, threads: Math.max(1, threads) } };
}

export async function resolveConsumers(names: string[], config: PostboxConfig): Promise<ConsumerDefinition[]> {
  const out: ConsumerDefinition[] = [];
  for (const name of names) {
    if (name === DEMO_CONSUMER) {
      out.push(demoProjectionConsumer(config.topics[0]!.topic));
      continue;
    }
    let module: { default?: unknown };
    try {
      module = (await import(pathToFileURL(resolve(name)).href)) as { default?: unknown };
    } catch (cause) {
      throw new ConfigError(
        `consumer "${name}" is neither "${DEMO_CONSUMER}" nor a loadable module: ${(cause as Error).message}`,
        { cause },
      );
    }
    const exported = Array.isArray(module.default) ? module.default : [module.default];
    for (const d of exported) {
      if (
        !d ||
        typeof d !== 'object' ||
        typeof (d as ConsumerDefinition).handler !== 'string' ||
        !(d as ConsumerDefinition).limits
      ) {
        throw new ConfigError(`module ${name} must default-export defineConsumer({...}) or a list of them`);
      }
      out.push(d as ConsumerDefinition);
    }
  }
  const names2 = out.map((d) => d.name);
  const dup = names2.find((n, i) => names2.indexOf(n) !== i);
  if (dup) throw new ConfigError(`consumer "${dup}" is named twice; each consumer runs once per process`);
  return out;
}
