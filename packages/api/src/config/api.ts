import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { ConfigError } from '@postbox/engine';
import { CHECK_NAMES, type CheckName, isCheckName } from '@postbox/engine/reconcile';

export type Scope = 'viewer' | 'operator' | 'admin' | 'payload';
const SCOPES: readonly Scope[] = ['viewer', 'operator', 'admin', 'payload'];

/**
 * How the control plane runs. production: no GraphiQL, introspection for admin only, tokens required. development
 * (the demo of `postbox start`): GraphiQL, introspection for every caller, an operator token made up and printed
 * when none is configured.
 */
export type ApiMode = 'production' | 'development';
const MODES: readonly ApiMode[] = ['production', 'development'];

/** A configured bearer token: who it is (the audit log's actor) and what it may do. Only its hash is kept. */
export interface ApiToken {
  actor: string;
  scopes: Set<Scope>;
  sha256: Buffer;
}

export interface ApiConfig {
  host: string;
  port: number;
  /** Production (ApiMode): no GraphiQL, introspection only for admin, tokens required. */
  production: boolean;
  tokens: ApiToken[];
  /** A token generated for this run (development only, when none is configured); printed at start. */
  devToken: string | null;
  /** @defaultValue 65536 */
  maxBodyBytes: number;
  /**
   * Origins a browser may call the API from (POSTBOX_API_CORS_ORIGINS). @defaultValue [] — no CORS headers at all:
   * a page of another origin cannot read an answer.
   */
  corsOrigins?: string[];
  /**
   * Mutation fields a token may run per minute, as a bucket of that many refilled evenly; an operation with N
   * mutation fields (aliases included) takes N (POSTBOX_API_MUTATIONS_PER_MINUTE). @defaultValue 60
   */
  mutationsPerMinute?: number;
  /** Subscriptions one token may hold open at once (POSTBOX_API_SUBSCRIPTIONS_PER_TOKEN). @defaultValue 4 */
  subscriptionsPerToken?: number;
  /** Subscriptions open at once over all callers (POSTBOX_API_SUBSCRIPTIONS). @defaultValue 32 */
  subscriptionsTotal?: number;
  /** A file of tokens (POSTBOX_API_TOKENS_FILE: entries as POSTBOX_API_TOKENS, one per line), read again on SIGHUP. */
  tokensFile?: string | null;
  /**
   * Modules whose saga definitions the control plane loads (POSTBOX_SAGA_MODULES): the operator actions build
   * their commands from them. Without any, sagas can be read but not acted on. @defaultValue []
   */
  sagaModules?: string[];
  /**
   * Modules whose reconciliation sources the control plane loads (POSTBOX_RECONCILE_MODULES, see
   * reconcile/modules.ts). Without any, the outbox and consumer checks are skipped. @defaultValue []
   */
  reconcileModules?: string[];
  /** Grace periods per check (POSTBOX_RECONCILE_GRACE_MS="check=ms,…"). @defaultValue the engine's */
  reconcileGraceMs?: Partial<Record<CheckName, number>>;
}

export interface ReadApiConfigOptions {
  /**
   * The mode when POSTBOX_ENV is unset or empty. Only the demo (`postbox start`) passes development; every other
   * entry keeps production, so a deployment that forgot the variable fails closed. @defaultValue 'production'
   */
  defaultMode?: ApiMode;
}

/**
 * POSTBOX_API_PORT (default 4000), POSTBOX_API_HOST (default 127.0.0.1), POSTBOX_ENV = production | development
 * (default production; NODE_ENV is not read), POSTBOX_API_TOKENS = "actor:scope+scope:token,…" (scopes: viewer,
 * operator, admin, payload; admin implies all, operator implies viewer), POSTBOX_SAGA_MODULES = "module,…" (saga
 * definitions, see parseSagaModules). Without tokens, development generates one operator token per run.
 */
export function readApiConfig(env: NodeJS.ProcessEnv = process.env, options: ReadApiConfigOptions = {}): ApiConfig {
  const production = parseMode(env.POSTBOX_ENV, options.defaultMode ?? 'production') === 'production';
  const tokensFile = env.POSTBOX_API_TOKENS_FILE || null;
  const tokens = readTokens(env, tokensFile);
  let devToken: string | null = null;
  if (tokens.length === 0) {
    if (production)
      throw new ConfigError(
        'POSTBOX_API_TOKENS must name at least one token in production (actor:scopes:token); POSTBOX_ENV=development makes one up for a local run',
      );
    devToken = `dev-${randomBytes(18).toString('base64url')}`;
    tokens.push(apiToken('developer', ['operator'], devToken));
  }
  return {
    host: env.POSTBOX_API_HOST ?? '127.0.0.1',
    port: port(env.POSTBOX_API_PORT, 4000),
    production,
    tokens,
    devToken,
    maxBodyBytes: 65_536,
    corsOrigins: parseCorsOrigins(env.POSTBOX_API_CORS_ORIGINS ?? ''),
    mutationsPerMinute: positiveInt(env.POSTBOX_API_MUTATIONS_PER_MINUTE, 'POSTBOX_API_MUTATIONS_PER_MINUTE', 60),
    subscriptionsPerToken: positiveInt(
      env.POSTBOX_API_SUBSCRIPTIONS_PER_TOKEN,
      'POSTBOX_API_SUBSCRIPTIONS_PER_TOKEN',
      4,
    ),
    subscriptionsTotal: positiveInt(env.POSTBOX_API_SUBSCRIPTIONS, 'POSTBOX_API_SUBSCRIPTIONS', 32),
    tokensFile,
    sagaModules: parseSagaModules(env.POSTBOX_SAGA_MODULES ?? ''),
    reconcileModules: parseSagaModules(env.POSTBOX_RECONCILE_MODULES ?? ''),
    reconcileGraceMs: parseReconcileGrace(env.POSTBOX_RECONCILE_GRACE_MS ?? ''),
  };
}

/**
 * POSTBOX_ENV, exactly one of the modes; unset or empty is `fallback`. Anything else (prod, Production, staging)
 * stops the start: a misspelt production must not quietly run as development.
 */
export function parseMode(raw: string | undefined, fallback: ApiMode): ApiMode {
  if (raw === undefined || raw === '') return fallback;
  if ((MODES as readonly string[]).includes(raw)) return raw as ApiMode;
  throw new ConfigError(`POSTBOX_ENV must be ${MODES.join(' or ')} (got "${raw}"); unset means production`);
}

/** "outbox-missing=30000,consumer-behind=60000": grace periods per check (as `postbox reconcile` reads them). */
export function parseReconcileGrace(value: string): Partial<Record<CheckName, number>> {
  const out: Partial<Record<CheckName, number>> = {};
  for (const entry of value
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)) {
    const [name, ms] = entry.split('=');
    const n = Number(ms);
    if (!name || !isCheckName(name) || !Number.isInteger(n) || n < 0)
      throw new ConfigError(`POSTBOX_RECONCILE_GRACE_MS entry "${entry}" must be check=ms (${CHECK_NAMES.join(', ')})`);
    out[name] = n;
  }
  return out;
}

/** "./sagas/order.ts,@acme/sagas": module paths (relative to the working directory) or package specifiers. */
export function parseSagaModules(value: string): string[] {
  return value
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
}

export function apiToken(actor: string, scopes: Scope[], token: string): ApiToken {
  return { actor, scopes: expand(scopes), sha256: hash(token) };
}

export function hash(token: string): Buffer {
  return createHash('sha256').update(token, 'utf8').digest();
}

/**
 * The tokens of POSTBOX_API_TOKENS and of the POSTBOX_API_TOKENS_FILE (read now: a reload calls this again). An
 * actor may hold several tokens (one entry each), so a new one can be handed out before the old one is removed.
 */
export function readTokens(env: NodeJS.ProcessEnv, file: string | null): ApiToken[] {
  const tokens = parseTokens(env.POSTBOX_API_TOKENS ?? '');
  if (file === null) return tokens;
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (cause) {
    throw new ConfigError(`POSTBOX_API_TOKENS_FILE ${file} cannot be read: ${(cause as Error).message}`, { cause });
  }
  const lines = text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'));
  return [...tokens, ...parseTokens(lines.join(','), `POSTBOX_API_TOKENS_FILE ${file}`)];
}

/** "https://ops.example.com,https://admin.example.com": exact origins, each scheme://host[:port]. */
export function parseCorsOrigins(value: string): string[] {
  const origins = value
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const o of origins) {
    let parsed: URL | null = null;
    try {
      parsed = new URL(o);
    } catch {}
    if (!parsed || parsed.origin !== o)
      throw new ConfigError(`POSTBOX_API_CORS_ORIGINS entry "${o}" must be an origin: scheme://host[:port], no path`);
  }
  return origins;
}

function positiveInt(raw: string | undefined, name: string, fallback: number): number {
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new ConfigError(`${name} must be an integer ≥ 1, got "${raw}"`);
  return n;
}

/** "alice:operator+payload:s3cret,bob:viewer:t0ken" (a token may itself contain ':'). */
export function parseTokens(value: string, source = 'POSTBOX_API_TOKENS'): ApiToken[] {
  return value
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((entry, i) => {
      const first = entry.indexOf(':');
      const second = entry.indexOf(':', first + 1);
      const where = `${source} entry ${i + 1}`;
      if (first < 1 || second < 0) throw new ConfigError(`${where} must be actor:scope+scope:token`);
      const actor = entry.slice(0, first);
      const scopes = entry.slice(first + 1, second).split('+');
      const token = entry.slice(second + 1);
      for (const s of scopes)
        if (!SCOPES.includes(s as Scope))
          throw new ConfigError(`${where}: unknown scope "${s}" (viewer, operator, admin, payload)`);
      if (token.length < 16) throw new ConfigError(`${where}: the token must be at least 16 characters`);
      return apiToken(actor, scopes as Scope[], token);
    });
}

function expand(scopes: Scope[]): Set<Scope> {
  const out = new Set(scopes);
  if (out.has('admin')) for (const s of SCOPES) out.add(s);
  if (out.has('operator')) out.add('viewer');
  return out;
}

function port(raw: string | undefined, fallback: number): number {
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0 || n > 65535)
    throw new ConfigError(`POSTBOX_API_PORT must be a port number 0…65535, got "${raw}"`);
  return n;
}
