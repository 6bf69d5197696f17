// npm run bench -- <scenario> [options]: each figure beside the baselines that bound it, measured in the same run.
import { writeFile } from 'node:fs/promises';
import os from 'node:os';
import { stackUp } from '@postbox/stack';
import { readEnvironment } from './environment.ts';
import { HELP, parseOptions, type BenchOptions } from './options.ts';
import { plan } from './plan.ts';
import { markdownTable, Report, textTable } from './report.ts';
import { cleanupAll, useKafkaBrokers } from './support.ts';
import { profileRolesInto, stopAllRoles } from './workload/processes.ts';

async function main(argv: string[]): Promise<number> {
  const parsed = parseOptions(argv);
  if (parsed.help) {
    console.log(HELP);
    return 0;
  }
  const { options } = parsed;
  profileRolesInto(options.cpuProfDir);
  // As `npm test` does: the local stack starts what is not running (a cold start, jar download included, is not
  // timed); with DATABASE_URL, REDIS_URL and KAFKA_BROKERS all set it starts nothing and checks they answer.
  // --broker nats, rabbitmq: the stack starts each one's server too (POSTBOX_BROKER names the one it adds, as for
  // `npm start`); spawned roles are told their broker each (workload/processes.ts), never by this process' env.
  for (const broker of options.brokers) {
    process.env.POSTBOX_BROKER = broker;
    const env = await stackUp({
      log: (line) => process.stderr.write(`${line}\n`),
      ...(broker === 'kafka' ? { kafkaBrokers: options.kafkaBrokers } : {}),
    });
    if (broker === 'kafka' && options.kafkaBrokers > 1) await useKafkaBrokers(env.KAFKA_BROKERS, options.kafkaBrokers);
  }
  delete process.env.POSTBOX_BROKER;
  const started = performance.now();
  const startedAt = new Date().toISOString();
  const env = await readEnvironment(options.brokers);
  const report = new Report();
  const failures: Array<{ step: string; error: string }> = [];
  const steps: Record<string, number> = {};
  const result = (complete: boolean) => ({
    suite: 'postbox-bench',
    format: 1,
    startedAt,
    seconds: (performance.now() - started) / 1000,
    complete,
    parameters: parameters(options),
    ...env,
    ...report.results,
    stepSeconds: steps,
    failures,
  });
  for (const step of plan(options)) {
    process.stderr.write(`\n== ${step.kind} ${step.name}\n`);
    const t = performance.now();
    try {
      await step.run({ options, report });
    } catch (cause) {
      const error = describe(cause);
      failures.push({ step: `${step.kind} ${step.name}`, error });
      report.row(step.kind, `${step.name}: FAILED`, '—', [], error.slice(0, 120));
      process.stderr.write(`\nbench: ${step.kind} ${step.name} failed: ${error}\n`);
      await stopAllRoles();
    }
    steps[`${step.kind}.${step.name}`] = Math.round((performance.now() - t) / 100) / 10;
    // A long run stopped early still leaves the figures of every step it finished.
    if (options.json) await writeFile(options.json, `${JSON.stringify(result(false), null, 2)}\n`);
  }
  const seconds = (performance.now() - started) / 1000;
  // The machine is shared: the load around the run says how noisy its figures are.
  env.machine.loadAverageAtEnd = os.loadavg().map((l) => Math.round(l * 100) / 100);
  console.log(
    `\n${textTable(report.rows)}\n\n${options.scenario}${options.quick ? ' --quick' : ''}: ${seconds.toFixed(0)} s`,
  );
  if (options.json) await writeFile(options.json, `${JSON.stringify(result(true), null, 2)}\n`);
  if (options.markdown) await writeFile(options.markdown, markdownTable(report.rows, env, options, seconds));
  return failures.length > 0 ? 1 : 0;
}

function parameters(o: BenchOptions) {
  return { ...o };
}

function describe(e: unknown): string {
  const parts: string[] = [];
  for (let c: unknown = e, depth = 0; c && depth < 5; c = (c as Error).cause, depth++)
    parts.push((c as Error).message ?? String(c));
  return parts.join(' ← ');
}

let exiting = false;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    if (exiting) return;
    exiting = true;
    process.stderr.write(`\nbench: ${signal}: stopping spawned roles, dropping bench databases and topics\n`);
    void stopAllRoles()
      .then(cleanupAll)
      .finally(() => process.exit(130));
  });
}

main(process.argv.slice(2))
  .then(
    (code) => (process.exitCode = code),
    (error: unknown) => {
      console.error(`bench: ${describe(error)}`);
      process.exitCode = 2;
    },
  )
  .finally(async () => {
    await stopAllRoles();
    const problems = await cleanupAll();
    for (const p of problems) console.error(`bench: cleanup: ${p}`);
  });
