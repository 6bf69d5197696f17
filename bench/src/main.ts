// npm run bench -- <scenario> [options]: measured figures beside the baselines of the same run.
import { parseArgs } from 'node:util';
import { writeFile } from 'node:fs/promises';
import { produceBaseline } from './produce-baseline.ts';
import { relayScenario } from './relay-scenario.ts';

const HELP = `npm run bench -- <scenario> [options]

scenarios:
  relay   pre-filled outbox of N rows drained to Kafka, with 0 (main thread), 1 and 2 pool threads,
          beside raw kafkajs produce (acks=all, idempotent) of the same records in the same run
options:
  --events N      events (default 100000)
  --payload B     payload bytes (default 1024)
  --partitions P  topic partitions (default 12)
  --threads T     only this pool size (default: 0,1,2)
  --batch B       relay batch size (default 500)
  --json FILE     write the result as JSON
  -h, --help`;

async function main(): Promise<number> {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      help: { type: 'boolean', short: 'h' },
      events: { type: 'string' },
      payload: { type: 'string' },
      partitions: { type: 'string' },
      threads: { type: 'string' },
      batch: { type: 'string' },
      json: { type: 'string' },
    },
  });
  const scenario = positionals[0];
  if (values.help || !scenario) {
    console.log(HELP);
    return values.help ? 0 : 2;
  }
  const num = (v: string | undefined, d: number, name: string) => {
    const n = v === undefined ? d : Number(v);
    if (!Number.isInteger(n) || n < 0) throw new Error(`--${name} must be a non-negative integer, got "${v}"`);
    return n;
  };
  const events = num(values.events, 100_000, 'events');
  const payload = num(values.payload, 1024, 'payload');
  const partitions = num(values.partitions, 12, 'partitions');
  const batch = num(values.batch, 500, 'batch');
  if (scenario !== 'relay') {
    console.error(`unknown scenario "${scenario}"\n\n${HELP}`);
    return 2;
  }
  const threads = values.threads === undefined ? [0, 1, 2] : [num(values.threads, 2, 'threads')];
  const raw = await produceBaseline({ events, payload, partitions, batch });
  const runs = [];
  for (const t of threads) runs.push(await relayScenario({ events, payload, partitions, threads: t, batchSize: batch }));
  console.log(`\nrelay: ${events} events, ${payload} B payload, ${partitions} partitions, batch ${batch}`);
  console.log(`${'what'.padEnd(34)}${'events/s'.padStart(10)}${'ratio to raw'.padStart(14)}`);
  console.log(`${`raw kafkajs produce (batch ${batch})`.padEnd(34)}${raw.eventsPerSecond.toFixed(0).padStart(10)}${'1.00'.padStart(14)}`);
  for (const r of runs) {
    console.log(`${`relay, ${r.threads} pool threads`.padEnd(34)}${r.eventsPerSecond.toFixed(0).padStart(10)}${(r.eventsPerSecond / raw.eventsPerSecond).toFixed(2).padStart(14)}`);
  }
  if (values.json) await writeFile(values.json, JSON.stringify({ scenario, events, payload, partitions, batch, baselines: { kafkaProduce: raw }, runs }, null, 2));
  return 0;
}

main().then(
  (code) => (process.exitCode = code),
  (error: unknown) => {
    console.error(`bench: ${(error as Error).message}`);
    process.exitCode = 1;
  },
);
