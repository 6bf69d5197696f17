import { parseArgs } from 'node:util';
import { connect, createLogger, createWaker, migrate, type Sql } from '@postbox/engine';
import { outboxBacklog } from '@postbox/engine/control';
import type { Consumer } from '@postbox/engine/runtime';
import { awaitTopics, startConsumer } from '@postbox/workers';
import { readApiConfig } from '../config/api.ts';
import { type PostboxConfig, readConfig } from '../config/env.ts';
import { brokerKind, linkEnv } from '../config/links.ts';
import { enforceLinkSecurity } from '../config/link-security.ts';
import { developmentStack } from './dev-stack.ts';
import { startTelemetry } from '../telemetry/sdk.ts';
import { startOrderService, type DemoOrderService } from '../demo/order-service.ts';
import { migrateDemo } from '../demo/migrate-demo.ts';
import { demoProjectionConsumer } from '../demo/order-projection.ts';
import { demoOrderSource, participants } from '../demo/reconcile.ts';
import { fulfilmentTopicSpecs } from '../demo/saga/fulfilment-saga.ts';
import { fulfilmentConsumers } from '../demo/saga/consumers.ts';
import { startFulfilmentRoles } from '../demo/saga/fulfilment-roles.ts';
import { SAGA_STATUSES, sagaCounts, TERMINAL, type SagaCounts } from '@postbox/engine/saga';
import { consumerRuntime } from './consume-command.ts';
import { startRelayOrAbort } from './relay-command.ts';
import { startControlPlaneRoles } from './control-plane-role.ts';
import { startPartitionRole } from './partition-role.ts';
import { StartInterrupted, startedTogether } from './role-set.ts';
import { runRoles } from './run-roles.ts';
import { checkLinks } from './link-check.ts';
import { shutdownSignal } from './signals.ts';

const HELP = `postbox start — the whole system on this machine: local stack (what is missing), migrations, relay,
a demo order service producing traffic, its projection consumer, an order-fulfilment saga (reserve stock →
charge payment → ship) with three participant services (inventory, payments, shipping) and its timer runner,
and the GraphQL control plane (POSTBOX_API_PORT, default 4000). Prints progress every 5 s; Ctrl-C stops it
cleanly.

The parts start as one unit: if one cannot start (a port in use, a service down), those already started stop
again and the command exits 1 with one line saying what failed.

Environment: as for postbox relay, plus
  POSTBOX_DEMO_RATE              demo events/s, default 50; 0 = no demo traffic (and no sagas)
  POSTBOX_DEMO_SAGA_RATE         fulfilment sagas/s among the placed orders, default 2; 0 = no new sagas (the
                                 saga's roles still run while any saga is unfinished)
  POSTBOX_DEMO_REFUSED_PAYMENTS  share of payments declined (the saga compensates), default 0.1
  POSTBOX_DEMO_LOST_REPLIES      share of step replies lost (the saga asks: resolving), default 0.05
  POSTBOX_DEMO_SAGA_PREFIX       prefix of the saga's topics and consumer groups, default demo
  POSTBOX_ENV                    the control plane's mode, default development here (production | development)
Options:
  -h, --help   this text`;

export async function startCommand(argv: string[]): Promise<number> {
  const { values } = parseArgs({ args: argv, options: { help: { type: 'boolean', short: 'h' } } });
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  // The demo is the one place the control plane defaults to development (GraphiQL, a printed token); an explicit
  // POSTBOX_ENV still wins, and `postbox api` alone stays production. Read first: a bad value stops before anything starts.
  const apiConfig = readApiConfig(process.env, { defaultMode: 'development' });
  const signal = shutdownSignal();
  // Inside the repository the development stack starts what is not running; an installed Postbox uses the links set.
  const devStack = await developmentStack();
  // linkEnv checks the links' security; the stack's links are checked before it starts anything.
  if (devStack) enforceLinkSecurity(devStack.stackEnv(), brokerKind());
  const links = devStack ? await devStack.stackUp({ log: (line) => console.log(line) }) : await linkEnv();
  if (signal.aborted) return 0;
  const config = readConfig(links, process.env, { logLevel: process.env.LOG_LEVEL ?? 'warn' });
  await checkLinks(config, ['postgres', 'broker', 'redis']);
  const log = createLogger({ level: config.logLevel, name: 'postbox' });
  await using _telemetry = await startTelemetry('start', { log });
  const topic = config.topics[0]!.topic;
  const newSagas = config.demoRate > 0 && config.demoSagaRate > 0;
  // Order: the relay (first, but for RabbitMQ), every consumer side by side, the saga's timer runner, the demo, the
  // control plane; stopped in reverse: control plane, demo, timer runner, the consumers (committing offsets; among
  // themselves in no fixed order), the relay (finishing its in-flight batches), then the demo's pool.
  return runRoles(signal, log, async (roles) => {
    const sql = await roles.start(
      'database',
      async () => connect({ url: config.databaseUrl, max: 8, applicationName: 'postbox-demo' }),
      (s: Sql) => s.end({ timeout: 5 }),
    );
    const migrations = async () => {
      await migrate(sql, { log: (line) => console.log(`migrate: ${line}`) });
      await migrateDemo(sql, (line) => console.log(`migrate: ${line}`));
    };
    await roles.start('migrations', migrations, async () => {});
    // The saga's roles run while any saga is unfinished, even when no new one starts (POSTBOX_DEMO_SAGA_RATE=0):
    // those in flight reach their end instead of waiting for the next run that starts sagas.
    const sagas = newSagas || (await unfinishedSagas(sql)) > 0;
    const sagaTopics = sagas ? fulfilmentTopicSpecs(config.demoSaga.prefix) : [];
    await startPartitionRole(roles, config, log);
    const topics = async () => {
      if (!(await awaitTopics({ broker: config.broker, topics: [...config.topics, ...sagaTopics], log, signal })))
        throw new StartInterrupted('topics');
    };
    await roles.start('topics', topics, async () => {});
    const startRelay = () =>
      roles.start(
        'relay',
        () => startRelayOrAbort(config, log, signal, sagaTopics),
        (r) => r.stop(),
      );
    // The relay first, so the outbox drains while the consumers join — except on RabbitMQ, which keeps no log: a
    // message published before a group's queue exists reaches nobody (failed for good), and the consumers make
    // their queues when they start.
    const relayFirst = config.broker.kind !== 'rabbitmq';
    const early = relayFirst ? await startRelay() : null;
    const runtime = consumerRuntime(config, log, false, sagaTopics);
    const groups = [
      demoProjectionConsumer(topic).name,
      ...(sagas ? fulfilmentConsumers(config.demoSaga).map((c) => c.name) : []),
    ];
    const [consumer, fulfilment] = await whileJoining(
      groups,
      config,
      startedTogether([
        roles.start(
          'consumer',
          () => startConsumer(demoProjectionConsumer(topic), runtime),
          (c: Consumer) => c.stop(),
        ),
        sagas ? startFulfilmentRoles(roles, sql, config.demoSaga, runtime, log) : Promise.resolve(null),
      ]),
    );
    const relay = early ?? (await startRelay());
    const waker = createWaker(sql);
    const demo = await roles.start(
      'demo order service',
      async () =>
        config.demoRate > 0
          ? startOrderService(sql, waker, {
              topic,
              ratePerSecond: config.demoRate,
              log,
              ...(fulfilment && newSagas
                ? { sagas: { ratePerSecond: config.demoSagaRate, start: fulfilment.start } }
                : {}),
            })
          : null,
      async (d: DemoOrderService | null) => {
        await d?.stop();
        await waker.flush();
      },
    );
    await startControlPlaneRoles(roles, config, apiConfig, {
      ...(fulfilment ? { sagas: fulfilment.orchestrator } : {}),
      reconcile: { sources: [demoOrderSource({ topic })], participants: fulfilment ? participants : [] },
    });
    console.log(
      `postbox running: relay ${relay.relay.owner} (lanes ${relay.relay.stats().lanes.length}), demo orders → ${topic} at ${config.demoRate}/s → consumer ${consumer.definition.name}`,
    );
    if (fulfilment && !newSagas)
      console.log('demo sagas: none started (rate 0); the saga roles run until those in flight end');
    if (fulfilment && newSagas) {
      const s = config.demoSaga;
      console.log(
        `demo sagas: ${fulfilment.definition.type} at ${config.demoSagaRate}/s (payments declined ${share(s.refusedPayments)}, replies lost ${share(s.lostReplies)}) → consumers ${fulfilment.consumers.map((c) => c.definition.name).join(', ')}`,
      );
    }
    console.log('Ctrl-C to stop.');
    const progress = () => {
      const counts = fulfilment ? sagaCounts(sql) : Promise.resolve(null);
      void Promise.all([outboxBacklog(sql), counts]).then(
        ([b, sagaCount]) => {
          const age = b.oldestPendingAgeMs === null ? '-' : `${(b.oldestPendingAgeMs / 1000).toFixed(1)}s`;
          const c = consumer.stats();
          console.log(
            `[${new Date().toISOString().slice(11, 19)}] committed ${demo?.committed() ?? 0}  published ${b.published}  pending ${b.pending + b.publishing}  failed ${b.failed}  oldest pending ${age}  |  consumed ${c.applied + c.drained}  duplicates absorbed ${c.duplicates}  parked ${c.parked}  consumer failed ${c.failed}  lag ${c.lag.length === 0 ? '-' : c.totalLag}${sagaLine(sagaCount)}`,
          );
        },
        (cause: unknown) => console.log(`progress: database unavailable (${(cause as Error).message})`),
      );
    };
    await roles.start(
      'progress',
      async () => setInterval(progress, 5000),
      async (timer) => {
        clearInterval(timer);
        console.log(
          'stopping: control plane, demo, the saga timers and consumers (committing offsets), then the relay (finishing in-flight batches)…',
        );
      },
    );
  }).then((code) => {
    if (!signal.aborted) return code;
    console.log('stopped cleanly; the stack keeps running (npm run stack -- down to stop it)');
    return code;
  });
}

/**
 * Waits for the consumers to join their groups, and says so when it takes long: after a crash each group holds
 * the dead members' partitions until their session ends.
 */
async function whileJoining<T>(groups: string[], config: PostboxConfig, joined: Promise<T>): Promise<T> {
  const kafka = config.broker.kind === 'kafka';
  const holdMs = (kafka ? config.kafkaSessionTimeoutMs : config.partitionLeaseMs) ?? (kafka ? 30_000 : 15_000);
  const notice = setTimeout(
    () =>
      console.log(
        `waiting for the consumer groups (${groups.join(', ')}) to let this run's members join: members of a previous run that did not stop cleanly hold their partitions until their ${kafka ? 'session' : 'partition lease'} ends, up to ${Math.round(holdMs / 1000)} s here`,
      ),
    3000,
  );
  try {
    return await joined;
  } finally {
    clearTimeout(notice);
  }
}

/** Sagas not ended: live, or frozen for an operator (whose retry or resume needs the saga's roles running). */
async function unfinishedSagas(sql: Sql): Promise<number> {
  const { byStatus } = await sagaCounts(sql);
  return SAGA_STATUSES.filter((s) => !TERMINAL.has(s)).reduce((n, s) => n + byStatus[s], 0);
}

/** The progress line's saga part: every status an operator watches, and closed ones once there are any. */
function sagaLine(counts: SagaCounts | null): string {
  if (!counts) return '';
  const c = counts.byStatus;
  const closed = c.closed_manually > 0 ? `  closed ${c.closed_manually}` : '';
  return `  |  sagas running ${c.running}  resolving ${c.resolving}  compensating ${c.compensating}  completed ${c.completed}  compensated ${c.compensated}  needs attention ${c.needs_attention}${closed}`;
}

function share(value: number): string {
  return `${Math.round(value * 1000) / 10} %`;
}
