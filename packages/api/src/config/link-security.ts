import { ConfigError, redactUrl } from '@postbox/engine';
import { parseBrokers } from '@postbox/engine/kafka';
import { parseNatsServers } from '@postbox/engine/nats';
import type { BrokerKind, LinkEnv } from './links.ts';

/**
 * Links Postbox refuses to start on, unless POSTBOX_ALLOW_INSECURE names them:
 *
 * 1. **TLS that does not verify the server** — anywhere, loopback included: PostgreSQL with any sslmode but
 *    verify-full (require, prefer, allow, verify-ca, or an sslrootcert without verify-full: postgres.js then checks
 *    the chain but not the host name), RabbitMQ's `amqps://…?insecure`. (`rediss://`, `tls://` NATS and
 *    `KAFKA_SSL` always verify the certificate and the host name.)
 * 2. **A password the network can read** — a link without TLS that carries a password to a host that is not a
 *    loopback address (localhost, 127.0.0.0/8, ::1, a Unix socket): a PostgreSQL password (the server picks the
 *    authentication and may ask for it in clear), Redis' AUTH, AMQP's PLAIN login, NATS' user, password or token,
 *    Kafka's SASL PLAIN. Kafka's SCRAM over plaintext does not send the password and is not refused.
 *
 * A plaintext link to loopback keeps working with its password (the development stack's links are such), and so
 * does a plaintext link that carries no secret.
 */
export const INSECURE_LINK_NAMES = ['postgres', 'kafka', 'rabbitmq', 'nats', 'redis'] as const;
export type InsecureLinkName = (typeof INSECURE_LINK_NAMES)[number];

export interface InsecureLink {
  link: InsecureLinkName;
  /** What is insecure, naming the variable; then how to fix it. */
  problem: string;
  fix: string;
}

const POSTGRES_VARIABLES = [
  'DATABASE_URL',
  'DATABASE_URL_RELAY',
  'DATABASE_URL_CONSUMER',
  'DATABASE_URL_API',
  'DATABASE_URL_OPERATOR',
];

/**
 * Refuses the insecure links POSTBOX_ALLOW_INSECURE does not name (one ConfigError listing each, with its fix),
 * and writes one warning line per allowed one, at every start.
 */
export function enforceLinkSecurity(
  links: LinkEnv,
  broker: BrokerKind,
  env: NodeJS.ProcessEnv = process.env,
  warn: (line: string) => void = (line) => console.error(line),
): void {
  const allowed = allowedInsecure(env);
  const found = insecureLinks(links, broker, env);
  const refused = found.filter((f) => !allowed.has(f.link));
  if (refused.length > 0)
    throw new ConfigError(
      refused
        .map((f) => `${f.problem}; ${f.fix}, or set POSTBOX_ALLOW_INSECURE=${f.link} to accept the risk`)
        .join('\n'),
    );
  for (const f of found)
    warn(`postbox: WARNING: insecure ${f.link} link allowed by POSTBOX_ALLOW_INSECURE: ${f.problem}`);
}

/** POSTBOX_ALLOW_INSECURE: a comma list of link names; a name Postbox does not know is refused. */
export function allowedInsecure(env: NodeJS.ProcessEnv = process.env): Set<InsecureLinkName> {
  const names = (env.POSTBOX_ALLOW_INSECURE ?? '')
    .split(',')
    .map((n) => n.trim().toLowerCase())
    .filter(Boolean);
  const unknown = names.filter((n) => !(INSECURE_LINK_NAMES as readonly string[]).includes(n));
  if (unknown.length > 0)
    throw new ConfigError(
      `POSTBOX_ALLOW_INSECURE names ${unknown.map((n) => JSON.stringify(n)).join(', ')}: use a comma list of ${INSECURE_LINK_NAMES.join(', ')}`,
    );
  return new Set(names as InsecureLinkName[]);
}

/** KAFKA_SSL: true, 1, yes, on or false, 0, no, off (unset: off); anything else is refused, not read as off. */
export function kafkaSsl(env: NodeJS.ProcessEnv = process.env): boolean {
  const raw = env.KAFKA_SSL?.trim().toLowerCase();
  if (raw === undefined || raw === '') return false;
  if (['true', '1', 'yes', 'on'].includes(raw)) return true;
  if (['false', '0', 'no', 'off'].includes(raw)) return false;
  throw new ConfigError(`KAFKA_SSL must be true or false, got ${JSON.stringify(env.KAFKA_SSL)}`);
}

/** Every insecure link of the configuration: PostgreSQL's URLs, Redis, and the broker in use. */
export function insecureLinks(
  links: LinkEnv,
  broker: BrokerKind,
  env: NodeJS.ProcessEnv = process.env,
): InsecureLink[] {
  const out: InsecureLink[] = [];
  for (const variable of POSTGRES_VARIABLES) {
    const url = variable === 'DATABASE_URL' ? links.DATABASE_URL : env[variable];
    if (url) out.push(...postgresProblems(variable, url, env));
  }
  if (links.REDIS_URL) out.push(...redisProblems(links.REDIS_URL));
  if (broker === 'kafka' && links.KAFKA_BROKERS) out.push(...kafkaProblems(links.KAFKA_BROKERS, env));
  if (broker === 'nats' && links.NATS_URL) out.push(...natsProblems(links.NATS_URL, env));
  if (broker === 'rabbitmq' && links.RABBITMQ_URL) out.push(...rabbitProblems(links.RABBITMQ_URL));
  return out;
}

/** postgres.js' reading of the TLS settings (its parseOptions): sslmode, ssl, PGSSLMODE, PGSSL, sslrootcert. */
function postgresProblems(variable: string, url: string, env: NodeJS.ProcessEnv): InsecureLink[] {
  const p = parseLink(url);
  const q = p.query;
  const rootcert = q.get('sslrootcert');
  const from = q.get('sslmode')
    ? `${variable} has sslmode=${q.get('sslmode')}`
    : q.get('ssl')
      ? `${variable} has ssl=${q.get('ssl')}`
      : env.PGSSLMODE
        ? `PGSSLMODE=${env.PGSSLMODE}`
        : env.PGSSL
          ? `PGSSL=${env.PGSSL}`
          : rootcert
            ? `${variable} has sslrootcert without sslmode`
            : '';
  const mode = (
    q.get('sslmode') ||
    q.get('ssl') ||
    env.PGSSLMODE ||
    env.PGSSL ||
    (rootcert ? 'require' : '')
  ).toLowerCase();
  const fix = 'use sslmode=verify-full with sslrootcert=<CA file> (or sslrootcert=system)';
  if (rootcert === 'system' || mode === 'verify-full' || mode === 'true') return [];
  if (mode !== '' && mode !== 'disable' && mode !== 'false') {
    const why =
      mode === 'prefer' || mode === 'allow'
        ? "the connection falls back to plaintext, and the server's certificate is not verified"
        : mode === 'verify-ca' || rootcert
          ? "the server's certificate chain is checked, but not that it was issued for the host dialled"
          : "the server's certificate is not verified";
    return [{ link: 'postgres', problem: `${from}: ${why}`, fix }];
  }
  const hosts = q.get('host')?.split(',') ?? (p.hosts.length > 0 ? p.hosts : (env.PGHOST?.split(',') ?? []));
  const password = p.password || q.get('password') || env.PGPASSWORD;
  return password ? clearPassword('postgres', variable, hosts, fix) : [];
}

function redisProblems(url: string): InsecureLink[] {
  const p = parseLink(url);
  if (p.scheme === 'rediss' || !(p.password || p.query.get('password'))) return [];
  return clearPassword('redis', 'REDIS_URL', p.hosts, 'use rediss:// (with ?sslrootcert=<CA file> for a private CA)');
}

function kafkaProblems(brokers: string, env: NodeJS.ProcessEnv): InsecureLink[] {
  const tls = kafkaSsl(env) || Boolean(env.KAFKA_SSL_CA);
  if (tls || env.KAFKA_SASL_MECHANISM?.toLowerCase() !== 'plain') return [];
  return clearPassword(
    'kafka',
    'KAFKA_SASL_MECHANISM=plain without KAFKA_SSL',
    parseBrokers(brokers).map((b) => parseLink(`kafka://${b}`).hosts[0] ?? b),
    'set KAFKA_SSL=true (and KAFKA_SSL_CA=<CA file> for a private CA), or use scram-sha-256',
  );
}

function natsProblems(list: string, env: NodeJS.ProcessEnv): InsecureLink[] {
  const servers = parseNatsServers(list);
  if (env.NATS_TLS_CA || servers.some((s) => s.startsWith('tls://'))) return [];
  const parsed = servers.map((s) => parseLink(s.includes('://') ? s : `nats://${s}`));
  if (!parsed.some((p) => p.userinfo)) return [];
  return clearPassword(
    'nats',
    'NATS_URL',
    parsed.flatMap((p) => p.hosts),
    'use tls:// servers (with NATS_TLS_CA=<CA file> for a private CA)',
  );
}

function rabbitProblems(url: string): InsecureLink[] {
  const p = parseLink(url);
  if (p.scheme === 'amqps')
    return p.query.has('insecure')
      ? [
          {
            link: 'rabbitmq',
            problem: "RABBITMQ_URL has ?insecure: the server's certificate is not verified",
            fix: 'remove ?insecure (and name a private CA with sslrootcert=<CA file>)',
          },
        ]
      : [];
  return p.password
    ? clearPassword('rabbitmq', 'RABBITMQ_URL', p.hosts, 'use amqps:// (with ?sslrootcert=<CA file>)')
    : [];
}

/** The password goes in clear unless every host is this machine. */
function clearPassword(link: InsecureLinkName, what: string, hosts: string[], fix: string): InsecureLink[] {
  const remote = (hosts.length > 0 ? hosts : ['localhost']).filter((h) => !isLoopback(h));
  if (remote.length === 0) return [];
  return [{ link, problem: `${what} sends a password without TLS to ${redactUrl(remote.join(','))}`, fix }];
}

/** localhost, 127.0.0.0/8, ::1 (also IPv4-mapped), or a Unix socket's path. */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  return (
    h === '' ||
    h === 'localhost' ||
    h.startsWith('/') ||
    h === '::1' ||
    /^(::ffff:)?127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h)
  );
}

interface ParsedLink {
  scheme: string;
  userinfo: string;
  /** Decoded; empty when none. */
  password: string;
  /** Host names without ports (brackets of an IPv6 address kept off). */
  hosts: string[];
  query: URLSearchParams;
}

/**
 * `scheme://[user[:password]@]host[:port][,host[:port]…][/path][?query]`, read by hand: a multi-host PostgreSQL
 * URL is not a WHATWG URL.
 */
function parseLink(url: string): ParsedLink {
  const m = /^([A-Za-z][A-Za-z0-9+.-]*):\/\/(.*)$/s.exec(url.trim());
  const scheme = m ? m[1]!.toLowerCase() : '';
  const rest = m ? m[2]! : url.trim();
  const q = rest.search(/[?#]/);
  const beforeQuery = q < 0 ? rest : rest.slice(0, q);
  const query = new URLSearchParams(q < 0 ? '' : rest.slice(q + 1).split('#')[0]);
  const at = beforeQuery.lastIndexOf('@');
  const userinfo = at < 0 ? '' : beforeQuery.slice(0, at);
  const afterAt = beforeQuery.slice(at + 1);
  const slash = afterAt.indexOf('/');
  const authority = slash < 0 ? afterAt : afterAt.slice(0, slash);
  const colon = userinfo.indexOf(':');
  return {
    scheme,
    userinfo,
    password: colon < 0 ? '' : safeDecode(userinfo.slice(colon + 1)),
    hosts: authority
      .split(',')
      .filter(Boolean)
      .map((h) => (h.startsWith('[') ? h.slice(1, h.indexOf(']')) : h.replace(/:\d*$/, ''))),
    query,
  };
}

function safeDecode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}
