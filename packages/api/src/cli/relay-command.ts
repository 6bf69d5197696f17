import { parseArgs } from 'node:util';
import { createLogger } from '@postbox/engine';
import { readConfig } from '../config/env.ts';
import { stackEnv } from '../stack/index.ts';
import { startTelemetry } from '../telemetry/sdk.ts';
import { relaySql, startRelay } from './relay-role.ts';
import { shutdownSignal, untilAborted } from './signals.ts';

const HELP = `postbox relay — carry committed outbox events to Kafka (run as many as you like; lanes are shared)

Environment: DATABASE_URL, KAFKA_BROKERS, POSTBOX_TOPICS, POSTBOX_RELAY_* (see README, Configuration).
Options:
  --threads N   publish worker threads (0 = publish on the main thread); overrides POSTBOX_RELAY_THREADS
  -h, --help    this text
SIGINT/SIGTERM: stop claiming, finish in-flight batches, hand back leases, exit.`;

export async function relayCommand(argv: string[]): Promise<number> {
  const { values } = parseArgs({ args: argv, options: { help: { type: 'boolean', short: 'h' }, threads: { type: 'string' } } });
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  const config = readConfig(stackEnv(), values.threads === undefined ? process.env : { ...process.env, POSTBOX_RELAY_THREADS: values.threads });
  const log = createLogger({ level: config.logLevel, name: 'postbox' });
  await using _telemetry = await startTelemetry('relay', { log });
  const signal = shutdownSignal();
  const sql = relaySql(config);
  try {
    const relay = await startRelay(config, sql, log, signal);
    await untilAborted(signal);
    await relay?.stop();
    return 0;
  } finally {
    await sql.end({ timeout: 5 });
  }
}
