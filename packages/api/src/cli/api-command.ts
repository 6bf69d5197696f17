import { parseArgs } from 'node:util';
import { writeFile } from 'node:fs/promises';
import { ConfigError, createLogger } from '@postbox/engine';
import { linkEnv } from '../config/links.ts';
import { apiToken, readApiConfig, readTokens } from '../config/api.ts';
import { readConfig } from '../config/env.ts';
import { printedSchema } from '../graphql/schema/index.ts';
import { startTelemetry } from '../telemetry/sdk.ts';
import { startControlPlaneRoles } from './control-plane-role.ts';
import { runRoles } from './run-roles.ts';
import { checkLinks } from './link-check.ts';
import { shutdownSignal } from './signals.ts';

const HELP = `postbox api — the GraphQL control plane (backlog, events, failures, replay, sagas, reconciliation, audit)

Environment: DATABASE_URL, KAFKA_BROKERS, REDIS_URL, POSTBOX_API_PORT (4000), POSTBOX_API_HOST (127.0.0.1),
POSTBOX_API_TOKENS ("actor:scope+scope:token,…"; scopes viewer, operator, admin, payload; an actor may hold
several), POSTBOX_API_TOKENS_FILE (the same entries, one per line, read again on SIGHUP: add or revoke tokens
without a restart), POSTBOX_API_CORS_ORIGINS (origins a browser may call from; default none: CORS off),
POSTBOX_API_MUTATIONS_PER_MINUTE (mutation fields per token, aliases counted, default 60),
POSTBOX_API_SUBSCRIPTIONS_PER_TOKEN (open subscriptions per token, default 4), POSTBOX_API_SUBSCRIPTIONS (in all,
default 32), POSTBOX_ENV = production (the default: no GraphiQL, introspection for admin only, tokens required) or
development (GraphiQL, open introspection, a token made up when none is set; anything else refuses to start),
POSTBOX_SAGA_MODULES ("./sagas.ts,@acme/sagas": modules exporting \`sagas\`, arrays of saga definitions, which
saga actions are built from; without it sagas are read, not acted on),
POSTBOX_RECONCILE_MODULES (modules exporting \`sources\` of defineReconcileSource results, as for postbox reconcile;
without them the outbox and consumer checks are skipped), POSTBOX_RECONCILE_GRACE_MS ("check=ms,…").
Options:
  --print-schema [FILE]   print the SDL (or write it to FILE) and exit
  -h, --help              this text`;

export async function apiCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { help: { type: 'boolean', short: 'h' }, 'print-schema': { type: 'boolean' } },
  });
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  if (values['print-schema']) {
    if (positionals[0]) await writeFile(positionals[0], printedSchema());
    else process.stdout.write(printedSchema());
    return 0;
  }
  const api = readApiConfig();
  const config = readConfig(await linkEnv(), process.env, { role: 'api' });
  await checkLinks(config, ['postgres', 'broker', 'redis']);
  const log = createLogger({ level: config.logLevel, name: 'postbox' });
  await using _telemetry = await startTelemetry('api', { log });
  const signal = shutdownSignal();
  // SIGHUP reads the tokens again (the file and POSTBOX_API_TOKENS): a revoked token is refused from the next
  // request on. A file that does not parse keeps the tokens in force and says why.
  const reload = () => {
    try {
      const tokens = readTokens(process.env, api.tokensFile ?? null);
      if (tokens.length === 0 && api.devToken) tokens.push(apiToken('developer', ['operator'], api.devToken));
      if (tokens.length === 0)
        throw new ConfigError('the reloaded tokens are empty: every caller would be locked out (as at start-up)');
      api.tokens.splice(0, api.tokens.length, ...tokens);
      log.info({ tokens: tokens.length }, 'API tokens reloaded');
    } catch (cause) {
      log.error({ err: cause }, 'API tokens not reloaded: the tokens in force stay');
    }
  };
  process.on('SIGHUP', reload);
  try {
    return await runRoles(signal, log, async (roles) => {
      await startControlPlaneRoles(roles, config, api);
    });
  } finally {
    process.off('SIGHUP', reload);
  }
}
