import { ConfigError } from '@postbox/engine';
import { listConsumers } from '@postbox/engine/control';
import { check, collect, formatReport, totals, type EffectSource, type VerifyConsumer } from '@postbox/engine/verify';
import { createBrokerOffsets, createTopicReader } from '@postbox/workers';
import { linkEnv } from '../config/links.ts';
import { readConfig } from '../config/env.ts';
import { DEMO_CONSUMER } from '../demo/order-projection.ts';
import {
  LONG_QUERY_TIMEOUT_S,
  nonNegativeOption,
  operatorCommand,
  printJson,
  withDatabase,
} from './operator-command.ts';

const HELP = `postbox verify — what PostgreSQL and the log say: nothing lost, applied twice, reordered or stuck

usage: postbox verify [--consumer NAME ...] [--topic TOPIC ...] [--effects-log SQL | --effects-counts SQL]
                      [--final] [--stuck-after MS] [--timeout MS] [--json]

Reads every topic of the consumers from start to end, each consumer group's committed offsets, then the outbox,
inboxes, failure store, retry ledger and parked events in one snapshot, and checks (after Jepsen's Kafka checks):
  log       every acknowledged send is in the log at its position, one event per position, nothing read whose
            write failed, versions of an aggregate in order; re-sends counted as duplicates
  consumer  every event its committed offset has passed is applied, ignored, in the failure store, on the retry
            ledger or parked (else lost); none applied twice; aggregates applied in order; the same event_id with
            another payload is a conflict in the failure store, never absorbed silently
  sagas     every saga ended, frozen for an operator or waiting on a live timer; one transition per version; no
            step sent forward twice; compensations last first; nothing sent while frozen
  stuck     expired leases not reclaimed, pending rows and retries overdue, gaps parked with no failure behind
            them — older than --stuck-after (default 60000 ms)
Consumers: every one in the registry (each \`postbox consume\` announces itself), or those named with --consumer.
Side effects are the handler's: --effects-log is a query returning one row per effect in the order they
happened (event_id, aggregate_id, aggregate_version); --effects-counts one row per aggregate of a projection
(aggregate_id, version, applied_count). $1 in the query is the consumer's name. Without either, double effects
are not checked (the demo consumer, ${DEMO_CONSUMER}, uses its projection's counts).
--final: everything should have settled; events still in flight are a violation too.
--json: the report as JSON; each violation names its invariant (e.g. lost, applied-twice, out-of-order), the
consumer (null: the log), a count, sample ids and whether only a final check fails on it.
Exit code: 0 when every check holds, 1 on any violation, 2 on a usage error.
Environment: DATABASE_URL, POSTBOX_BROKER (kafka | nats | rabbitmq), KAFKA_BROKERS, NATS_URL or RABBITMQ_URL.
On NATS, offsets are stream sequences and a group's committed offset is its durable's ack floor + 1.`;

export const verifyCommand = operatorCommand({
  name: 'verify',
  help: HELP,
  options: {
    consumer: { type: 'string', multiple: true },
    topic: { type: 'string', multiple: true },
    'effects-log': { type: 'string' },
    'effects-counts': { type: 'string' },
    final: { type: 'boolean' },
    'stuck-after': { type: 'string' },
    timeout: { type: 'string' },
    json: { type: 'boolean' },
  },
  verb: 'none',
  usageErrors: 'throw',
  async run({ values }) {
    if (values['effects-log'] && values['effects-counts']) {
      console.error('postbox verify: give --effects-log or --effects-counts, not both');
      return 2;
    }
    const stuckAfterMs = nonNegativeOption(values['stuck-after'], 60_000, 'stuck-after');
    const timeoutMs = nonNegativeOption(values.timeout, 120_000, 'timeout');
    const config = readConfig(await linkEnv(), process.env, { role: 'operator' });
    return withDatabase(
      { command: 'verify', url: config.databaseUrl, max: 2, queryTimeoutS: LONG_QUERY_TIMEOUT_S },
      async (sql) => {
        const reader = createTopicReader(config.broker, timeoutMs);
        const offsets = createBrokerOffsets(config.broker, config.topics);
        try {
          const registered = await listConsumers(sql);
          const wanted = values.consumer ?? registered.map((c) => c.consumer_name);
          const unknown = wanted.filter((n) => !registered.some((c) => c.consumer_name === n));
          if (unknown.length > 0)
            throw new ConfigError(
              `not in the consumer registry (start it once with postbox consume): ${unknown.join(', ')}`,
            );
          const effects: EffectSource | undefined = values['effects-log']
            ? { kind: 'log', query: values['effects-log'] }
            : values['effects-counts']
              ? { kind: 'counts', query: values['effects-counts'] }
              : undefined;
          const consumers: VerifyConsumer[] = registered
            .filter((c) => wanted.includes(c.consumer_name))
            .map((c) => {
              const source = effects ?? (c.consumer_name === DEMO_CONSUMER ? DEMO_EFFECTS : undefined);
              return {
                name: c.consumer_name,
                groupId: c.group_id,
                topics: c.topics,
                ...(source ? { effects: source } : {}),
              };
            });
          if (consumers.length === 0 && !values.topic?.length) {
            console.error('postbox verify: no consumer in the registry and no --topic: nothing to verify');
            return 2;
          }
          const report = check(await collect({ sql, reader, offsets }, consumers, values.topic ?? []), {
            stuckAfterMs,
            final: values.final ?? false,
          });
          if (values.json) printJson({ ...report, totals: totals(report) });
          else {
            if (config.broker.kind === 'rabbitmq') console.log(NO_LOG);
            console.log(formatReport(report));
          }
          return report.ok ? 0 : 1;
        } finally {
          await reader.close();
          await offsets.close();
        }
      },
    );
  },
});

const NO_LOG =
  'RabbitMQ keeps no log (queues give messages away once acknowledged): the log-level checks — lost writes, positions, order in the log — are not made; the outbox, inboxes, effects, failures and sagas are.';

const DEMO_EFFECTS: EffectSource = {
  kind: 'counts',
  query: 'SELECT order_id AS aggregate_id, version, applied_count FROM demo_order_projection',
};
