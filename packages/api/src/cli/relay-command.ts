import type { TopicSpec } from '@postbox/engine/kafka';
import { parseArgs } from 'node:util';
import { ConfigError, createLogger, type Logger } from '@postbox/engine';
import { linkEnv } from '../config/links.ts';
import { startRelay } from '@postbox/workers';
import { readConfig, type PostboxConfig } from '../config/env.ts';
import { startTelemetry } from '../telemetry/sdk.ts';
import { startPartitionRole } from './partition-role.ts';
import { StartInterrupted } from './role-set.ts';
import { runRoles } from './run-roles.ts';
import { checkLinks } from './link-check.ts';
import { shutdownSignal } from './signals.ts';

const HELP = `postbox relay — carry committed outbox events to the broker (run as many as you like; lanes are shared)

Environment: DATABASE_URL, POSTBOX_BROKER (kafka | nats | rabbitmq), KAFKA_BROKERS, NATS_URL or RABBITMQ_URL,
POSTBOX_TOPICS, POSTBOX_RELAY_* (see docs/configuration.md), POSTBOX_HEAP_MB (the main thread's heap, default 256;
0 = V8's).
Options:
  --threads N   publish worker threads (0 = publish on the main thread); overrides POSTBOX_RELAY_THREADS
  -h, --help    this text
SIGINT/SIGTERM: stop claiming, finish in-flight batches, hand back leases, exit.`;

export async function relayCommand(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: { help: { type: 'boolean', short: 'h' }, threads: { type: 'string' } },
  });
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  const threads = values.threads === undefined ? undefined : Number(values.threads);
  if (threads !== undefined && (!Number.isInteger(threads) || threads < 0))
    throw new ConfigError(`--threads must be an integer ≥ 0, got "${values.threads}"`);
  const config = readConfig(await linkEnv(), process.env, {
    role: 'relay',
    ...(threads === undefined ? {} : { relayThreads: threads }),
  });
  await checkLinks(config, ['postgres', 'broker']);
  const log = createLogger({ level: config.logLevel, name: 'postbox' });
  await using _telemetry = await startTelemetry('relay', { log });
  const signal = shutdownSignal();
  return runRoles(signal, log, async (roles) => {
    await startPartitionRole(roles, config, log);
    await roles.start(
      'relay',
      () => startRelayOrAbort(config, log, signal),
      (relay) => relay.stop(),
    );
  });
}

/** The relay of the configured topics; a stop signal while the broker is not ready ends the start. */
/** `topics` adds topics outside POSTBOX_TOPICS (the demo saga's): RabbitMQ's publisher routes only known ones. */
export async function startRelayOrAbort(
  config: PostboxConfig,
  log: Logger,
  signal: AbortSignal,
  topics: TopicSpec[] = [],
) {
  const relay = await startRelay({
    databaseUrl: config.databaseUrl,
    broker: config.broker,
    topics: [...config.topics, ...topics],
    relay: config.relay,
    threads: config.relayThreads,
    log,
    signal,
  });
  if (!relay) throw new StartInterrupted('relay');
  return relay;
}
