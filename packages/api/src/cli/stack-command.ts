import { parseArgs } from 'node:util';
import { loadStack } from './dev-stack.ts';

const USAGE = `Usage: postbox stack <command> [options]

Runs PostgreSQL 17, Redis and Kafka 3.9 for development and tests, as background servers under
$POSTBOX_HOME (default: <repo>/.postbox). They keep running after the command exits.

Commands:
  up [--tls] [--kafka-brokers 1|3]
                  Start what is not running and wait until each server answers (idempotent).
                  DATABASE_URL, REDIS_URL, KAFKA_BROKERS: when set, that server is not started,
                  only checked. --tls: a local CA and a certificate for localhost (openssl, under
                  <home>/tls), TLS in PostgreSQL, Redis TLS on 16380 with an ACL user, a Kafka
                  SASL_SSL (SCRAM-SHA-256) listener on 19094; prints the variables for TLS clients.
                  Servers already running are restarted once to serve TLS; later ups keep it.
                  --kafka-brokers 3: a three-node KRaft cluster (kafka-1..3) instead of the one
                  broker: topics get replication factor 3, min.insync.replicas=2; prints its
                  KAFKA_BROKERS. Not with --tls.
  down [--purge]  Stop the servers this stack started. --purge also deletes their data and the
                  TLS material (the downloaded Kafka jars stay).
  status [--kafka-brokers 1|3]
                  Show each server, then the env lines to export (the cluster's when one of its
                  nodes runs, unless --kafka-brokers says):
                    export $(postbox stack status | grep =)
                  Exits 0 when all run, 1 otherwise.

Options:
  -h, --help      Show this help.

Addresses: postgres 127.0.0.1:15432, redis 127.0.0.1:16379, kafka 127.0.0.1:19092 (controller 19093);
the cluster's nodes 127.0.0.1:19192, 19292, 19392 (controllers 19193, 19293, 19393).
Logs: <home>/pg/postgres.log, <home>/redis/redis.log, <home>/kafka/kafka.log and kafka.out
(a cluster node's: <home>/kafka-<i>/).`;

/** `postbox stack …`: argv is what follows `stack`; resolves with the process exit code. */
export async function stackCommand(argv: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      options: {
        help: { type: 'boolean', short: 'h' },
        purge: { type: 'boolean' },
        tls: { type: 'boolean' },
        'kafka-brokers': { type: 'string' },
      },
      allowPositionals: true,
      strict: true,
    });
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n\n${USAGE}\n`);
    return 2;
  }
  const { values, positionals } = parsed;
  const [command, ...extra] = positionals;
  if (values.help || command === 'help') {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  if (values.purge && command !== 'down') {
    process.stderr.write(`--purge only goes with down\n\n${USAGE}\n`);
    return 2;
  }
  if (values.tls && command !== 'up') {
    process.stderr.write(`--tls only goes with up\n\n${USAGE}\n`);
    return 2;
  }
  const brokersFlag = values['kafka-brokers'];
  const kafkaBrokers = brokersFlag === undefined ? undefined : Number(brokersFlag);
  if (kafkaBrokers !== undefined && kafkaBrokers !== 1 && kafkaBrokers !== 3) {
    process.stderr.write(`--kafka-brokers must be 1 or 3, got "${brokersFlag}"\n\n${USAGE}\n`);
    return 2;
  }
  if (kafkaBrokers !== undefined && command !== 'up' && command !== 'status') {
    process.stderr.write(`--kafka-brokers only goes with up or status\n\n${USAGE}\n`);
    return 2;
  }
  if (kafkaBrokers === 3 && values.tls) {
    process.stderr.write(
      `--tls goes with one Kafka broker only: the three-node cluster has no TLS listeners (drop --tls or --kafka-brokers 3)\n`,
    );
    return 2;
  }
  if (command === undefined || extra.length > 0) {
    process.stderr.write(`${USAGE}\n`);
    return 2;
  }
  try {
    const { stackDown, stackUp } = await loadStack('stack');
    switch (command) {
      case 'up': {
        const env = await stackUp({ tls: values.tls ?? false, ...(kafkaBrokers ? { kafkaBrokers } : {}) });
        if (values.tls) await printTlsEnv();
        if (kafkaBrokers === 3) process.stdout.write(`KAFKA_BROKERS=${env.KAFKA_BROKERS}\n`);
        return 0;
      }
      case 'down':
        await stackDown({ purge: values.purge ?? false });
        return 0;
      case 'status':
        return await status(kafkaBrokers);
      default:
        process.stderr.write(`unknown stack command: ${command}\n\n${USAGE}\n`);
        return 2;
    }
  } catch (err) {
    process.stderr.write(`postbox stack ${command}: ${describe(err)}\n`);
    return 1;
  }
}

/** The variables of a client that reaches the stack over TLS only, to export. */
async function printTlsEnv(): Promise<void> {
  const env = await (await loadStack('stack')).stackTlsEnv();
  if (!env) return;
  process.stdout.write('# over TLS (verify-full, SASL_SSL + SCRAM, rediss + ACL user):\n');
  for (const [name, value] of Object.entries(env)) process.stdout.write(`${name}=${value}\n`);
}

async function status(kafkaBrokers: number | undefined): Promise<number> {
  const { services, env } = await (await loadStack('stack')).stackStatus(kafkaBrokers ? { kafkaBrokers } : {});
  for (const s of services) {
    const pid = s.pid === undefined ? '' : `pid ${s.pid}`;
    const state = s.running ? 'running' : 'stopped';
    process.stdout.write(`${[s.name.padEnd(8), state.padEnd(7), pid.padEnd(10), s.address].join('  ')}\n`);
  }
  for (const [name, value] of Object.entries(env)) process.stdout.write(`${name}=${value}\n`);
  return services.every((s) => s.running) ? 0 : 1;
}

/** The message, then each cause on its own line: the cause is usually the server's own words. */
function describe(err: unknown): string {
  const lines: string[] = [];
  let current: unknown = err;
  for (let depth = 0; current !== undefined && depth < 5; depth++) {
    if (current instanceof AggregateError && depth > 0) break;
    const text = current instanceof Error ? current.message : String(current);
    lines.push(depth === 0 ? text : `  caused by: ${text.replaceAll('\n', '\n    ')}`);
    current = current instanceof Error ? current.cause : undefined;
  }
  return lines.join('\n');
}
