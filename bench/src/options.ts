import { parseArgs } from 'node:util';
import { BENCH_BROKERS, type BenchBroker } from './brokers.ts';

/** Every scenario the suite runs; `all` runs them in this order (latency needs e2e's maximum first). */
export const SCENARIOS = [
  'relay',
  'consumer',
  'e2e',
  'drain',
  'latency',
  'scale',
  'backlog',
  'saga',
  'reconcile',
  'retention',
  'clients',
] as const;
export type ScenarioName = (typeof SCENARIOS)[number];

/** The run's parameters, resolved once; every field is written into the JSON result. */
export interface BenchOptions {
  /** As given: `all`, or the scenarios' names (`relay drain`). */
  scenario: string;
  /** The scenarios to run, in SCENARIOS' order. */
  scenarios: ScenarioName[];
  /** Events per scenario run. @defaultValue 100000 (quick: 20000) */
  events: number;
  /** Bytes of each event's data (JSON). @defaultValue 1024 */
  payload: number;
  /** Partitions of every topic the bench creates. @defaultValue 12 */
  partitions: number;
  /** Relay pool sizes of the relay scenario. @defaultValue [0, 1, 2, 4] */
  threads: number[];
  /**
   * Brokers the relay and drain scenarios run on, each beside its raw client's publish and consume rates.
   * @defaultValue ['kafka']
   */
  brokers: BenchBroker[];
  /** 1: the stack's single broker; 3: its KRaft cluster (`stack up --kafka-brokers 3`). @defaultValue 1 */
  kafkaBrokers: number;
  /** Relay and raw claim batch size. @defaultValue 500 */
  batch: number;
  /**
   * Events of the scenarios that run the whole pipeline or spawn processes (e2e, drain, scale): the consumer is the
   * slowest stage, so quick runs give them a quarter of `events`. @defaultValue events (quick: events / 4)
   */
  pipelineEvents: number;
  /**
   * Events of the backlog scenario. 2M keeps `all` within the hour on a 2-core machine (the relay drains ≈ 3.5k
   * ev/s beside the consumer); a 10M run is `--backlog 10000000` on its own. @defaultValue 2000000 (quick: 1000000)
   */
  backlogEvents: number;
  /** Events per simulated day of the retention scenario (60 days kept, then pruned to 30). @defaultValue 20000 (quick: 1000) */
  retentionEventsPerDay: number;
  /** Demo orders (aggregates) the reconcile scenario's checks run over. @defaultValue 1000000 (quick: 100000) */
  reconcileAggregates: number;
  /** How long each time-bounded measurement (raw producer at one concurrency, naive relay, …) runs. @defaultValue 10000 (quick: 2000) */
  windowMs: number;
  /** Drain window of the backlog scenario inside `all --quick` (0 = until the outbox is drained). @defaultValue 0 (all --quick: 30000) */
  backlogWindowMs: number;
  quick: boolean;
  json: string | null;
  markdown: string | null;
  /** Where the spawned roles (`postbox relay`, `postbox consume`) write V8 CPU profiles, one per thread; null = off. */
  cpuProfDir: string | null;
}

export const HELP = `npm run bench -- <scenario>... [options]

Every figure is measured beside the baselines that bound it, in the same run, on the same services, with
durability on (fsync, synchronous_commit, acks=all + idempotent producer, Redis AOF).

scenarios:
  e2e       live producer (business row + outbox row per transaction) → relay → Kafka → consumer, all at once
  drain     pre-filled outbox of N events → relay → Kafka (each --broker) → consumer → committed
  latency   open-loop load at 10 / 50 / 80 % of the measured e2e maximum; commit-to-consumer-commit percentiles
  relay     pre-filled outbox drained to Kafka (and NATS, RabbitMQ with --broker) with 0 (main thread), 1, 2, 4 pool
            threads; then with the @platformatic/kafka publisher (POSTBOX_KAFKA_PUBLISHER=platformatic)
  consumer  pre-filled topic consumed into the inbox: one transaction per event vs shared transactions
  scale     1, 2, 3 relay processes; 1, 2, 3 consumer processes (real \`postbox relay\` / \`postbox consume\`)
  backlog   a 2M (quick: 1M; --backlog 10000000 for 10M) backlog: resident memory of every role over time, claim rate at start and end
  saga      three-step sagas (participants and the reply consumer on real Kafka) per second beside the e2e
            events/s of the same run (6 events per saga), then start → completed p50/p99 at half that rate
  clients   enqueue through each database client's adapter (pg, Drizzle, Kysely, Prisma, TypeORM) beside postgres.js
  reconcile every reconciliation check over 1M (quick: 100k) demo orders with 100 broken per check: time, rate,
            peak memory, findings = breakages
  retention 60 days of traffic kept (daily partitions), then 30 simulated days pruned by daily retention runs
            while a live load runs: table sizes, relay claim rate and p99 before / during / after
  all       every scenario above, baselines and peers once
options:
  --events N        events per scenario (default 100000; quick 20000; e2e, drain, scale: a quarter when quick)
  --payload BYTES   event data size (default 1024)
  --partitions P    partitions per topic (default 12)
  --threads T       relay pool sizes, e.g. 2 or 0,2 (default 0,1,2,4)
  --broker B        brokers of the relay and drain scenarios: kafka, nats, rabbitmq or several, e.g.
                    kafka,nats,rabbitmq (default kafka); the stack starts each one's server, and each is measured
                    beside its raw client's publish and consume rates
  --kafka-brokers N 1 (default) or 3: the stack's Kafka is one broker, or a KRaft cluster of three (topics with
                    replication factor 3, min.insync.replicas 2, acks=all): the figures then include replication
  --batch B         relay and raw claim batch (default 500)
  --backlog N       backlog events (default 2000000; quick 1000000; a 10M run: --backlog 10000000 alone)
  --per-day N       events per simulated day of the retention scenario (default 20000; quick 1000)
  --aggregates N    demo orders of the reconcile scenario (default 1000000; quick 100000)
  --window MS       length of each time-bounded measurement (default 10000; quick 2000)
  --json FILE       write the result as JSON (stable keys: see README, Benchmarks), rewritten after every step
                    (complete: false until the run ends), so a run stopped early keeps its figures
  --markdown FILE   write the results table as markdown
  --cpu-prof DIR    spawned relay and consumer processes write V8 CPU profiles (every thread) under DIR/<role>;
                    summarise with: npm run profile-summary -- DIR (in-process scenarios: run the bench itself
                    under node --cpu-prof)
  --quick           small runs: all finishes in under 5 minutes
  -h, --help        this text
environment:
  POSTBOX_KAFKA_PUBLISHER=platformatic   the pipeline scenarios' relays publish with @platformatic/kafka`;

export type Parsed = { help: true } | { help: false; options: BenchOptions };

/** Parses argv; throws an Error that says how to fix a bad value. */
export function parseOptions(argv: string[]): Parsed {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      help: { type: 'boolean', short: 'h' },
      quick: { type: 'boolean' },
      events: { type: 'string' },
      payload: { type: 'string' },
      partitions: { type: 'string' },
      threads: { type: 'string' },
      broker: { type: 'string' },
      'kafka-brokers': { type: 'string' },
      batch: { type: 'string' },
      backlog: { type: 'string' },
      aggregates: { type: 'string' },
      'per-day': { type: 'string' },
      window: { type: 'string' },
      json: { type: 'string' },
      markdown: { type: 'string' },
      'cpu-prof': { type: 'string' },
    },
  });
  if (values.help) return { help: true };
  if (positionals.length === 0) throw new Error('name a scenario (or all); see --help');
  for (const name of positionals)
    if (name !== 'all' && !(SCENARIOS as readonly string[]).includes(name))
      throw new Error(`unknown scenario "${name}": use one of ${SCENARIOS.join(', ')}, all`);
  if (positionals.includes('all') && positionals.length > 1)
    throw new Error(`all runs every scenario: name it alone, got ${positionals.join(' ')}`);
  const scenario = positionals.join(' ');
  const scenarios = scenario === 'all' ? [...SCENARIOS] : SCENARIOS.filter((s) => positionals.includes(s));
  const quick = values.quick === true;
  const threads =
    values.threads === undefined ? [0, 1, 2, 4] : values.threads.split(',').map((t) => int(t, 'threads', 0, 16));
  const events = int(values.events, 'events', 100, 100_000_000, quick ? 20_000 : 100_000);
  const brokers = (values.broker ?? 'kafka').split(',').map((b) => b.trim().toLowerCase());
  const kafkaBrokers = int(values['kafka-brokers'], 'kafka-brokers', 1, 3, 1);
  if (kafkaBrokers === 2) throw new Error('--kafka-brokers takes 1 or 3 (a cluster of three), got 2');
  for (const b of brokers)
    if (!(BENCH_BROKERS as readonly string[]).includes(b))
      throw new Error(`--broker takes ${BENCH_BROKERS.join(', ')} or several (comma-separated), got "${b}"`);
  return {
    help: false,
    options: {
      scenario,
      scenarios,
      events,
      pipelineEvents: quick ? Math.max(100, Math.floor(events / 4)) : events,
      payload: int(values.payload, 'payload', 16, 900_000, 1024),
      partitions: int(values.partitions, 'partitions', 1, 1000, 12),
      threads,
      brokers: [...new Set(brokers)] as BenchOptions['brokers'],
      kafkaBrokers,
      batch: int(values.batch, 'batch', 1, 10_000, 500),
      backlogEvents: int(values.backlog, 'backlog', 1000, 100_000_000, quick ? 1_000_000 : 2_000_000),
      retentionEventsPerDay: int(values['per-day'], 'per-day', 10, 10_000_000, quick ? 1000 : 20_000),
      reconcileAggregates: int(values.aggregates, 'aggregates', 1000, 100_000_000, quick ? 100_000 : 1_000_000),
      windowMs: int(values.window, 'window', 500, 600_000, quick ? 2000 : 10_000),
      backlogWindowMs: scenario === 'all' && quick ? 30_000 : 0,
      quick,
      json: values.json ?? null,
      markdown: values.markdown ?? null,
      cpuProfDir: values['cpu-prof'] ?? null,
    },
  };
}

function int(raw: string | undefined, name: string, min: number, max: number, fallback?: number): number {
  if (raw === undefined && fallback !== undefined) return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max)
    throw new Error(`--${name} must be an integer from ${min} to ${max}, got "${raw}"`);
  return n;
}
