import { DEFAULT_RELAY_THREADS } from '@postbox/workers';
import type { BenchOptions } from './options.ts';
import type { Environment } from './environment.ts';

/** One line of the results table: a figure, the ratios to what bounds it, and a note on what it measures. */
export interface Row {
  section: string;
  what: string;
  figure: string;
  ratios: string;
  note: string;
}

/**
 * The JSON result. Keys under baselines, peers and scenarios are stable (README, Benchmarks): tools read
 * scenarios.e2e.eventsPerSecond, scenarios.e2e.ratioToProducer, scenarios.drain.eventsPerSecond,
 * scenarios.drain.ratioToSlowestStage, scenarios.latency.at50.p50Ms / p99Ms, scenarios.relay.eventsPerSecond,
 * scenarios.relay.ratioToNaive, scenarios.relay.ratioToPeer, scenarios.backlog.rssGrowth, baselines.<name>.
 */
export interface Results {
  baselines: Record<string, Record<string, unknown> & { eventsPerSecond?: number }>;
  peers: Record<string, Record<string, unknown> & { eventsPerSecond?: number; error?: string }>;
  scenarios: Record<string, Record<string, unknown>>;
}

export class Report {
  readonly rows: Row[] = [];
  readonly results: Results = { baselines: {}, peers: {}, scenarios: {} };

  row(
    section: string,
    what: string,
    figure: string,
    ratios: Array<[string, number | null | undefined]> = [],
    note = '',
  ): void {
    const text = ratios
      .filter(([, v]) => v !== null && v !== undefined && Number.isFinite(v))
      .map(([label, v]) => `${(v as number).toFixed(2)}× ${label}`)
      .join('; ');
    this.rows.push({ section, what, figure, ratios: text, note });
  }

  /** A baseline's events/s, or null when it was not measured in this run (a ratio to it is then left out). */
  baseline(name: string): number | null {
    return (this.results.baselines[name]?.eventsPerSecond as number | undefined) ?? null;
  }

  peer(name: string): number | null {
    return (this.results.peers[name]?.eventsPerSecond as number | undefined) ?? null;
  }

  /** The relay's pool size for the roles a scenario spawns: the best of this run's relay scenario, or the default. */
  relayThreads(): number {
    return (this.results.scenarios.relay?.bestThreads as number | undefined) ?? DEFAULT_RELAY_THREADS;
  }
}

export const rate = (v: number) => `${Math.round(v).toLocaleString('en-US')} ev/s`;
export const ratio = (a: number | null | undefined, b: number | null | undefined) => (a && b ? a / b : null);

const HEAD = ['section', 'what', 'figure', 'ratio to its bound', 'note'] as const;

/** The table for the terminal: fixed-width columns. */
export function textTable(rows: Row[]): string {
  const cells = rows.map((r) => [r.section, r.what, r.figure, r.ratios, r.note]);
  const widths = HEAD.map((h, i) => Math.min(i === 4 ? 60 : 70, Math.max(h.length, ...cells.map((c) => c[i]!.length))));
  const line = (c: readonly string[]) =>
    c
      .map((v, i) => (i === 2 ? v.padStart(widths[i]!) : v.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(HEAD), widths.map((w) => '-'.repeat(w)).join('  '), ...cells.map(line)].join('\n');
}

/** The same table as markdown, with the run's date, machine, versions and durability above it (README). */
export function markdownTable(rows: Row[], env: Environment, options: BenchOptions, seconds: number): string {
  const esc = (s: string) => s.replace(/\|/g, '\\|');
  const v = env.versions;
  const d = env.durability;
  return [
    `Measured ${new Date().toISOString().slice(0, 10)} with \`npm run bench -- ${options.scenario}${options.quick ? ' --quick' : ''}\` ` +
      `(${seconds.toFixed(0)} s; ${options.events.toLocaleString('en-US')} events per scenario, ${options.pipelineEvents.toLocaleString('en-US')} for e2e, drain and scale, ${options.payload} B payloads, ` +
      `${options.partitions} partitions, backlog ${options.backlogEvents.toLocaleString('en-US')}).`,
    '',
    `Machine: ${env.machine.cpus} × ${env.machine.cpuModel}, ${env.machine.memoryGiB} GiB, ${env.machine.os}; load average (1/5/15 min) at start ${env.machine.loadAverageAtStart.join(' / ')}, at end ${(env.machine.loadAverageAtEnd ?? []).join(' / ')}. ` +
      `Everything (PostgreSQL, Kafka, Redis, the bench) on this one machine.`,
    '',
    `Versions: Node ${v.node}, PostgreSQL ${v.postgres}, Kafka ${v.kafka}, Redis ${v.redis}; kafkajs ${v.kafkajs}, postgres.js ${v['postgres.js']}, ` +
      `piscina ${v.piscina}, @platformatic/kafka ${v['@platformatic/kafka']}, pg-transactional-outbox ${v['pg-transactional-outbox']}.`,
    '',
    `Durability (read back from the servers): PostgreSQL fsync=${d.postgres.fsync}, synchronous_commit=${d.postgres.synchronous_commit}, ` +
      `wal_sync_method=${d.postgres.wal_sync_method}; Kafka producers acks=${d.kafka.producerAcks}, idempotent=${d.kafka.producerIdempotent}, ` +
      `pipeline relays on ${d.kafka.relayPublisher ?? 'kafkajs'}, ` +
      `min.insync.replicas=${d.kafka['min.insync.replicas']}; Redis appendonly=${d.redis.appendonly}, appendfsync=${d.redis.appendfsync}` +
      (d.nats
        ? `; NATS ${v.nats} JetStream ${d.nats.storage} storage, ${d.nats.replicas} replica, ${d.nats.publish}.`
        : '.'),
    '',
    `| ${HEAD.join(' | ')} |`,
    `| ${HEAD.map((_, i) => (i === 2 ? '---:' : '---')).join(' | ')} |`,
    ...rows.map((r) => `| ${[r.section, r.what, r.figure, r.ratios, r.note].map(esc).join(' | ')} |`),
    '',
  ].join('\n');
}
