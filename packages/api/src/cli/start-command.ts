import { parseArgs } from 'node:util';
import { connect, createLogger, createWaker, migrate, outboxBacklog } from '@postbox/engine';
import { readApiConfig } from '../config/api.ts';
import { readConfig } from '../config/env.ts';
import { createApiResources } from '../graphql/deps.ts';
import { startControlPlane } from '../graphql/server.ts';
import { startTelemetry } from '../telemetry/sdk.ts';
import { startOrderService } from '../demo/order-service.ts';
import { demoProjectionConsumer } from '../demo/order-projection.ts';
import { startConsumer } from './consume-command.ts';
import { stackUp } from '../stack/index.ts';
import { relaySql, startRelay } from './relay-role.ts';
import { shutdownSignal, untilAborted } from './signals.ts';

const HELP = `postbox start — the whole system on this machine: local stack (what is missing), migrations, relay,
a demo order service producing traffic, its projection consumer, and the GraphQL control plane
(POSTBOX_API_PORT, default 4000). Prints progress every 5 s; Ctrl-C stops it cleanly.

Environment: as for postbox relay, plus POSTBOX_DEMO_RATE (events/s, default 50; 0 = no demo traffic).
Options:
  -h, --help   this text`;

export async function startCommand(argv: string[]): Promise<number> {
  const { values } = parseArgs({ args: argv, options: { help: { type: 'boolean', short: 'h' } } });
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  const signal = shutdownSignal();
  const stack = await stackUp({ log: (line) => console.log(line) });
  const config = readConfig(stack);
  const log = createLogger({ level: process.env.LOG_LEVEL ?? 'warn', name: 'postbox' });
  await using _telemetry = await startTelemetry('start', { log });
  const sql = connect({ url: config.databaseUrl, max: 8, applicationName: 'postbox-demo' });
  const rsql = relaySql(config);
  try {
    await migrate(sql, { log: (line) => console.log(`migrate: ${line}`) });
    const relay = await startRelay(config, rsql, log, signal);
    if (!relay) return 0;
    const waker = createWaker(sql);
    const topic = config.topics[0]!.topic;
    const consumer = await startConsumer(config, demoProjectionConsumer(topic), log);
    const demo = config.demoRate > 0 ? startOrderService(sql, waker, { topic, ratePerSecond: config.demoRate }) : null;
    const apiConfig = readApiConfig();
    const resources = createApiResources(config);
    const plane = await startControlPlane(apiConfig, resources.deps);
    console.log(`GraphQL control plane: ${plane.url}${apiConfig.production ? '' : ' (GraphiQL in a browser)'}`);
    if (apiConfig.devToken) console.log(`development operator token (this run only): Authorization: Bearer ${apiConfig.devToken}`);
    console.log(`postbox running: relay ${relay.owner} (lanes ${relay.stats().lanes.length}), demo orders → ${topic} at ${config.demoRate}/s → consumer ${consumer.definition.name}`);
    console.log('Ctrl-C to stop.');
    const progress = setInterval(() => {
      void outboxBacklog(sql).then(
        (b) => {
          const age = b.oldestPendingAgeMs === null ? '-' : `${(b.oldestPendingAgeMs / 1000).toFixed(1)}s`;
          const c = consumer.stats();
          console.log(
            `[${new Date().toISOString().slice(11, 19)}] committed ${demo?.committed() ?? 0}  published ${b.published}  pending ${b.pending + b.publishing}  failed ${b.failed}  oldest pending ${age}  |  consumed ${c.applied + c.drained}  duplicates absorbed ${c.duplicates}  parked ${c.parked}  consumer failed ${c.failed}  lag ${c.lag.length === 0 ? '-' : c.totalLag}`,
          );
        },
        (cause: unknown) => console.log(`progress: database unavailable (${(cause as Error).message})`),
      );
    }, 5000);
    await untilAborted(signal);
    console.log('stopping: control plane, demo, then relay (finishing in-flight batches), then consumer (committing offsets)…');
    clearInterval(progress);
    await plane.close();
    await resources.close();
    await demo?.stop();
    await waker.flush();
    await relay.stop();
    await consumer.stop();
    console.log('stopped cleanly; the stack keeps running (npm run stack -- down to stop it)');
    return 0;
  } finally {
    await sql.end({ timeout: 5 });
    await rsql.end({ timeout: 5 });
  }
}
