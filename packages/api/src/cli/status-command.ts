import { redisProbe } from '@postbox/engine/bullmq';
import { BrokerHealthMonitor, checkHealth, type BrokerHealthReport, type Probe } from '@postbox/engine/control';
import { createBrokerOffsets } from '@postbox/workers';
import { readConfig } from '../config/env.ts';
import { linkEnv } from '../config/links.ts';
import { operatorCommand, printJson, printTable, withDatabase } from './operator-command.ts';

const HELP = `postbox status — do the dependencies answer, and are the broker's copies of Postbox's topics whole

usage: postbox status [--json]

Prints whether PostgreSQL, the broker and Redis answer (as the control plane's \`health\` does), then for Kafka
each node the cluster lists (does it answer a connection of its own) and, per topic of POSTBOX_TOPICS:
partitions, replication factor, min.insync.replicas, the smallest in-sync replica count (min ISR), and the
partitions under-replicated, offline and below min.insync.replicas (publishing to those stalls: their events
stay pending in the outbox, nothing is lost). The runbook for each is in docs/operations.md#broker-health.
Exit code: 0 when everything answers and every topic's state is ok, 1 otherwise, 2 on a usage error.
Environment: DATABASE_URL (or DATABASE_URL_OPERATOR), REDIS_URL, POSTBOX_BROKER, KAFKA_BROKERS, POSTBOX_TOPICS.`;

export const statusCommand = operatorCommand({
  name: 'status',
  help: HELP,
  options: { json: { type: 'boolean' } },
  verb: 'none',
  usageErrors: 'throw',
  async run({ values }) {
    const config = readConfig(await linkEnv(), process.env, { role: 'operator' });
    return withDatabase({ command: 'status', url: config.databaseUrl, max: 1 }, async (sql) => {
      const offsets = createBrokerOffsets(config.broker, config.topics);
      const redis = config.redisUrl ? redisProbe(config.redisUrl) : null;
      try {
        const probes: Record<string, Probe> = {
          postgres: () => sql`SELECT 1`,
          [config.broker.kind]: () => offsets.ping(),
          ...(redis ? { redis: () => redis.ping() } : {}),
        };
        const monitor = new BrokerHealthMonitor({ offsets, topics: config.topics.map((t) => t.topic) });
        const [health, brokerHealth] = await Promise.all([checkHealth(probes), monitor.probe()]);
        if (values.json) printJson({ ...health, brokerHealth });
        else print(health, brokerHealth);
        return health.ready && (brokerHealth === null || healthy(brokerHealth)) ? 0 : 1;
      } finally {
        redis?.close();
        await offsets.close();
      }
    });
  },
});

/**
 * Every node answers and every topic's state is `ok`: all replicas in sync, none offline, none below
 * min.insync.replicas (which all replicas in sync can still be, when it exceeds the replication factor).
 */
function healthy(report: BrokerHealthReport): boolean {
  return report.ok && report.brokers.every((b) => b.reachable) && report.topics.every((t) => state(t) === 'ok');
}

function print(health: Awaited<ReturnType<typeof checkHealth>>, report: BrokerHealthReport | null): void {
  for (const c of health.checks)
    console.log(`${c.name.padEnd(9)} ${c.ok ? 'ok' : 'DOWN'}  ${c.latencyMs} ms${c.error ? `  ${c.error}` : ''}`);
  if (report === null) {
    console.log('replicas: not read on this broker (Kafka only)');
    return;
  }
  if (!report.ok) {
    console.log(`replicas: UNKNOWN — ${report.error}`);
    return;
  }
  console.log('');
  printTable(
    report.brokers.map((b) => ({
      node: b.id,
      address: b.address,
      answers: b.reachable ? 'yes' : `NO (${b.error ?? 'no answer'})`,
    })),
  );
  console.log('');
  printTable(
    report.topics.map((t) => ({
      topic: t.topic,
      partitions: t.partitions,
      rf: t.replicationFactor,
      'min.insync': t.minInsyncReplicas ?? '?',
      'min ISR': t.minIsr,
      'under-replicated': t.underReplicated,
      offline: t.offline,
      'below min.insync': t.belowMinInsync,
      state: state(t),
    })),
  );
}

/** One word an operator greps for, worst first. */
function state(t: BrokerHealthReport['topics'][number]): string {
  if (t.error !== null) return `UNREADABLE: ${t.error}`;
  if (t.offline > 0) return 'OFFLINE';
  if (t.belowMinInsync > 0) return 'STALLED';
  if (t.underReplicated > 0) return 'UNDER-REPLICATED';
  return 'ok';
}
