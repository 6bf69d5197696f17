import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import {
  ConfigError,
  connect,
  registerConsumer,
  Consumer,
  createLogger,
  ensureTopics,
  inlineConsumeExecutor,
  KafkaSubscriber,
  RetryScheduler,
  type ConsumerDefinition,
  type Logger,
} from '@postbox/engine';
import { createConsumePool } from '@postbox/workers';
import { readConfig, type PostboxConfig } from '../config/env.ts';
import { DEMO_CONSUMER, demoProjectionConsumer } from '../demo/order-projection.ts';
import { stackEnv } from '../stack/index.ts';
import { startTelemetry } from '../telemetry/sdk.ts';
import { shutdownSignal, untilAborted } from './signals.ts';

const HELP = `postbox consume — run consumers: Kafka → per-aggregate ordered, inbox-deduplicated handlers

usage: postbox consume [consumer ...]

A consumer is "${DEMO_CONSUMER}" (the demo projection of POSTBOX_TOPICS' first topic; the default) or the path of
a module whose default export is a consumer definition (defineConsumer(...)) or a list of them. Run as many
processes as you like: a consumer's partitions are shared through its Kafka consumer group.

Environment: DATABASE_URL, KAFKA_BROKERS, POSTBOX_TOPICS (see README, Configuration).
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
  if (threads !== undefined && (!Number.isInteger(threads) || threads < 0)) throw new ConfigError(`--threads must be an integer ≥ 0, got "${values.threads}"`);
  const progressMs = values.progress === undefined ? 0 : Number(values.progress);
  if (!Number.isInteger(progressMs) || progressMs < 0) throw new ConfigError(`--progress must be milliseconds ≥ 0, got "${values.progress}"`);
  const config = readConfig(stackEnv());
  const log = createLogger({ level: config.logLevel, name: 'postbox' });
  await using _telemetry = await startTelemetry('consumer', { log });
  const signal = shutdownSignal();
  const definitions = await resolveConsumers(positionals.length > 0 ? positionals : [DEMO_CONSUMER], config);
  if (definitions.some((d) => d.name === DEMO_CONSUMER)) await ensureTopics(config.kafka, config.topics);
  const consumers: Consumer[] = [];
  try {
    for (const definition of definitions) consumers.push(await startConsumer(config, withThreads(definition, threads), log, threads === 0));
    console.log(`postbox consume: ${consumers.map((c) => `${c.definition.name} (${c.definition.topics.join(', ')})`).join('; ')}`);
    const timer = progressMs > 0 ? setInterval(() => consumers.forEach((c) => console.log(JSON.stringify({ 'consumer-progress': c.stats() }))), progressMs) : null;
    await untilAborted(signal);
    if (timer) clearInterval(timer);
  } finally {
    await Promise.all(consumers.map((c) => c.stop()));
    for (const c of consumers) console.log(JSON.stringify({ 'consumer-stats': c.stats() }));
  }
  return 0;
}

/**
 * Starts one consumer: a Kafka consumer group member, with a piscina pool (or the main thread when threads = 0),
 * and its durable retry schedule (ledger in PostgreSQL, alarm in Redis) when a Redis URL is configured.
 */
export async function startConsumer(config: PostboxConfig, definition: ConsumerDefinition, log: Logger, inline = false): Promise<Consumer> {
  await announce(config, definition);
  const subscriber = new KafkaSubscriber({
    ...config.kafka,
    clientId: `${config.kafka.clientId ?? 'postbox'}-consumer`,
    groupId: definition.groupId,
    topics: definition.topics,
    fromBeginning: definition.fromBeginning,
    sessionTimeoutMs: config.kafkaSessionTimeoutMs,
    heartbeatIntervalMs: config.kafkaHeartbeatMs,
    onCrash: ({ error, restart, replaced, retryInMs }) => {
      const fields = { consumer: definition.name, err: error.message, error_name: error.name, restart, replaced, retryInMs };
      if (replaced) log.error(fields, 'kafka consumer member crashed and kafkajs gave up on it; a new member joins the group');
      else log.warn(fields, 'kafka consumer member crashed; kafkajs restarts it');
    },
  });
  const executor = inline ? inlineConsumeExecutor(definition, config.databaseUrl) : createConsumePool({ databaseUrl: config.databaseUrl, definition });
  const retries = config.redisUrl
    ? {
        scheduler: new RetryScheduler({ redisUrl: config.redisUrl, consumer: definition.name, concurrency: inline ? 1 : definition.limits.threads }),
        sql: connect({ url: config.databaseUrl, max: 2, applicationName: `postbox-retry-${definition.name}` }),
        reconcileIntervalMs: config.retryReconcileMs,
      }
    : undefined;
  const consumer = new Consumer({ definition, subscriber, executor, log, ...(retries ? { retries } : {}) });
  try {
    await consumer.start();
  } catch (cause) {
    await consumer.stop().catch(() => {});
    await retries?.sql.end({ timeout: 5 });
    throw cause;
  }
  if (!retries) return consumer;
  // The retry pool closes after the consumer (due retries finish during stop()).
  const stop = consumer.stop.bind(consumer);
  consumer.stop = () => stop().finally(() => retries.sql.end({ timeout: 5 }));
  return consumer;
}

/** The control plane finds a consumer's group and topics in the registry (for lag and rates). */
async function announce(config: PostboxConfig, definition: ConsumerDefinition): Promise<void> {
  const sql = connect({ url: config.databaseUrl, max: 1, applicationName: `postbox-consumer-${definition.name}` });
  try {
    await registerConsumer(sql, { name: definition.name, groupId: definition.groupId, topics: definition.topics });
  } finally {
    await sql.end({ timeout: 5 });
  }
}

function withThreads(definition: ConsumerDefinition, threads: number | undefined): ConsumerDefinition {
  if (threads === undefined) return definition;
  return { ...definition, limits: { ...definition.limits, threads: Math.max(1, threads) } };
}

async function resolveConsumers(names: string[], config: PostboxConfig): Promise<ConsumerDefinition[]> {
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
      throw new ConfigError(`consumer "${name}" is neither "${DEMO_CONSUMER}" nor a loadable module: ${(cause as Error).message}`, { cause });
    }
    const exported = Array.isArray(module.default) ? module.default : [module.default];
    for (const d of exported) {
      if (!d || typeof d !== 'object' || typeof (d as ConsumerDefinition).handler !== 'string' || !(d as ConsumerDefinition).limits) {
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
