#!/usr/bin/env node
// The `postbox` command. Sub-commands live in ../cli; this file only dispatches and reports errors.
// Nothing of the engine is imported here: a role restarts itself first (role-heap.ts), before anything loads.
import { restartWithRoleHeap } from './role-heap.ts';

const COMMANDS: Record<string, { summary: string; load: () => Promise<(argv: string[]) => Promise<number>> }> = {
  start: {
    summary: 'stack up, migrate, relay and the demo order flow',
    load: async () => (await import('../cli/start-command.ts')).startCommand,
  },
  stack: {
    summary: 'local services: up | down [--purge] | status',
    load: async () => (await import('../cli/stack-command.ts')).stackCommand,
  },
  migrate: {
    summary: 'apply database migrations',
    load: async () => (await import('../cli/migrate-command.ts')).migrateCommand,
  },
  relay: {
    summary: 'run a relay (outbox → Kafka)',
    load: async () => (await import('../cli/relay-command.ts')).relayCommand,
  },
  failures: {
    summary: 'failures: list | show | blocked | replay (audited, --dry-run)',
    load: async () => (await import('../cli/failures-command.ts')).failuresCommand,
  },
  sagas: {
    summary: 'sagas: list | show | retry | resolve | compensate | mark-compensated | resume | close (audited)',
    load: async () => (await import('../cli/sagas-command.ts')).sagasCommand,
  },
  reconcile: {
    summary: 'check invariants against the business source of truth; repair findings (dry run, --execute)',
    load: async () => (await import('../cli/reconcile-command.ts')).reconcileCommand,
  },
  gaps: {
    summary: 'version gaps older than a threshold; --backfill re-publishes the missing versions',
    load: async () => (await import('../cli/gaps-command.ts')).gapsCommand,
  },
  retention: {
    summary: 'retention: plan | run [--dry-run] — archive and drop partitions past their window (audited)',
    load: async () => (await import('../cli/retention-command.ts')).retentionCommand,
  },
  keys: {
    summary: 'payload encryption keys: status | rotate (re-encrypt in batches, audited) | generate',
    load: async () => (await import('../cli/keys-command.ts')).keysCommand,
  },
  api: {
    summary: 'the GraphQL control plane (backlog, events, failures, replay, sagas, audit)',
    load: async () => (await import('../cli/api-command.ts')).apiCommand,
  },
  consume: {
    summary: 'run consumers (Kafka → inbox-deduplicated, ordered handlers)',
    load: async () => (await import('../cli/consume-command.ts')).consumeCommand,
  },
  status: {
    summary: "do PostgreSQL, the broker and Redis answer; the broker's replicas of Postbox's topics (exit 1 if not)",
    load: async () => (await import('../cli/status-command.ts')).statusCommand,
  },
  verify: {
    summary: 'check log and consumers: nothing lost, applied twice, reordered or stuck (exit 1 if so)',
    load: async () => (await import('../cli/verify-command.ts')).verifyCommand,
  },
};

function help(): string {
  const width = Math.max(...Object.keys(COMMANDS).map((c) => c.length));
  return [
    'postbox — reliable messaging: PostgreSQL outbox → Kafka → inbox-deduplicated consumers',
    '',
    'usage: postbox <command> [options]     (postbox <command> --help for details; postbox --version)',
    '',
    ...Object.entries(COMMANDS).map(([name, c]) => `  ${name.padEnd(width)}  ${c.summary}`),
  ].join('\n');
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    console.log(help());
    return name ? 0 : 2;
  }
  if (name === '--version' || name === '-v' || name === 'version') {
    console.log(await versionLine());
    return 0;
  }
  const command = COMMANDS[name];
  if (!command) {
    console.error(`postbox: unknown command "${name}"\n\n${help()}`);
    return 2;
  }
  // Before the command is loaded or opens anything: a role restarts itself in place with its heap bound.
  restartWithRoleHeap(argv);
  return (await command.load())(rest);
}

/** Which Postbox, on which Node: what a bug report needs first. */
async function versionLine(): Promise<string> {
  const { readFile } = await import('node:fs/promises');
  const manifest = JSON.parse(await readFile(new URL('../../package.json', import.meta.url), 'utf8')) as {
    version: string;
  };
  return `postbox ${manifest.version} (node ${process.versions.node})`;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  async (error: unknown) => {
    // PostboxError's code (config_invalid, …), or a system error's (ECONNREFUSED, …).
    const raw = (error as { code?: unknown })?.code;
    const code = typeof raw === 'string' ? ` [${raw}]` : '';
    console.error(await withoutSecrets(`postbox: ${(error as Error)?.message ?? String(error)}${code}`));
    if (process.env.POSTBOX_DEBUG) console.error(error);
    process.exitCode = 1;
  },
);

/** A message may quote a connection string: its passwords are masked (the engine loaded only on this path). */
async function withoutSecrets(text: string): Promise<string> {
  try {
    return (await import('@postbox/engine')).redactUrl(text);
  } catch {
    return text;
  }
}
