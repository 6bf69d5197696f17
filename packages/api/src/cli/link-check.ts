import { connect, ConfigError, redactUrl } from '@postbox/engine';
import { createKafka } from '@postbox/engine/kafka';
import { connectNats } from '@postbox/engine/nats';
import { closeRabbit, connectRabbit } from '@postbox/engine/rabbitmq';
import { redisConnection } from '@postbox/engine/bullmq';
import type { PostboxConfig } from '../config/env.ts';

/**
 * A command's links checked before it starts work: over TLS when its settings ask for it, each server's
 * certificate is one this process trusts and issued for the name it dials, and the credentials are accepted.
 * Such a failure cannot heal by waiting: it is one error naming the link, the address and what to check — not a
 * driver's stack trace minutes later, or a retry loop that never says why. A server that does not answer yet is
 * left to the command (a relay or consumer started before its broker waits for it).
 */
export type Link = 'postgres' | 'broker' | 'redis';

const TIMEOUT_MS = 5_000;

export async function checkLinks(config: PostboxConfig, links: Link[]): Promise<void> {
  const failures = await Promise.all(
    links.map((link) =>
      CHECKS[link](config).then(
        () => null,
        (error: unknown) => fatal(link, config, error),
      ),
    ),
  );
  const problems = failures.filter((f): f is string => f !== null);
  // A driver's message may quote the URL it dialled: what is printed goes through redactUrl whole.
  if (problems.length > 0) throw new ConfigError(redactUrl(problems.join('\n')));
}

const CHECKS: Record<Link, (config: PostboxConfig) => Promise<void>> = {
  async postgres(config) {
    const sql = connect({
      url: config.databaseUrl,
      max: 1,
      applicationName: 'postbox-link-check',
      extra: { connect_timeout: TIMEOUT_MS / 1000 },
    });
    try {
      await sql`SELECT 1`;
    } finally {
      await sql.end({ timeout: 1 });
    }
  },
  async broker(config) {
    const { broker } = config;
    switch (broker.kind) {
      case 'kafka': {
        const admin = createKafka({ ...broker.kafka, connectionTimeoutMs: TIMEOUT_MS }).admin({
          retry: { retries: 0 },
        });
        try {
          await admin.connect();
          await admin.describeCluster();
        } finally {
          await admin.disconnect();
        }
        return;
      }
      case 'nats': {
        const nc = await connectNats({ ...broker.nats, name: 'postbox-link-check', connectTimeoutMs: TIMEOUT_MS });
        await nc.close();
        return;
      }
      case 'rabbitmq':
        await closeRabbit(await connectRabbit(broker.rabbitmq.url));
        return;
    }
  },
  async redis(config) {
    if (!config.redisUrl) return;
    const redis = redisConnection(config.redisUrl, {
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      connectTimeout: TIMEOUT_MS,
      retryStrategy: () => null,
    });
    // The socket's own error (a certificate's, a refused password) comes as an event; the command's rejection
    // only says the connection closed.
    let first: unknown;
    redis.on('error', (error: unknown) => (first ??= error));
    try {
      await redis.connect();
      await redis.ping();
    } catch (error) {
      throw first ?? error;
    } finally {
      redis.disconnect();
    }
  },
};

const NAMES = { postgres: 'PostgreSQL', kafka: 'Kafka', nats: 'NATS', rabbitmq: 'RabbitMQ', redis: 'Redis' } as const;

/** Where the CA and the host name of each link are set. */
const TLS_SETTINGS = {
  postgres: 'DATABASE_URL (sslmode=verify-full&sslrootcert=<ca file>)',
  kafka: 'KAFKA_SSL_CA (and KAFKA_BROKERS)',
  nats: 'NATS_TLS_CA (and NATS_URL)',
  rabbitmq: 'RABBITMQ_URL (amqps://…/?sslrootcert=<ca file>)',
  redis: 'REDIS_URL (rediss://…/?sslrootcert=<ca file>)',
} as const;

const UNTRUSTED = new Set([
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'UNABLE_TO_GET_ISSUER_CERT',
  'CERT_SIGNATURE_FAILURE',
]);

/** Refused credentials, by link: PostgreSQL's SQLSTATE class 28, Redis' WRONGPASS/NOAUTH, Kafka's SASL error. */
function authRefused(error: unknown): boolean {
  const e = error as { code?: unknown; name?: unknown; message?: unknown };
  return (
    (typeof e.code === 'string' && e.code.startsWith('28')) ||
    e.name === 'KafkaJSSASLAuthenticationError' ||
    /^(WRONGPASS|NOAUTH)\b/.test(String(e.message))
  );
}

/** The error when it is one waiting cannot heal (TLS, credentials), else null. */
function fatal(link: Link, config: PostboxConfig, error: unknown): string | null {
  const code = codeOf(error);
  const tls = code !== undefined && (UNTRUSTED.has(code) || code.startsWith('ERR_TLS') || code.startsWith('CERT_'));
  return tls || authRefused(error) ? describe(link, config, error) : null;
}

function describe(link: Link, config: PostboxConfig, error: unknown): string {
  const server = link === 'broker' ? config.broker.kind : link;
  const settings = TLS_SETTINGS[server];
  const where = `${NAMES[server]} link (${address(link, config)})`;
  const code = codeOf(error);
  const message = messageOf(error);
  if (code && UNTRUSTED.has(code))
    return `${where}: TLS: the server's certificate is not signed by a CA this process trusts (${code}: ${message}); check the CA in ${settings}`;
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID')
    return `${where}: TLS: the server's certificate is not issued for the host dialled (${message}); dial the name the certificate names, see ${settings}`;
  if (code === 'CERT_HAS_EXPIRED' || code === 'CERT_NOT_YET_VALID')
    return `${where}: TLS: the server's certificate is not valid now (${code})`;
  return `${where}: ${message}`;
}

function address(link: Link, config: PostboxConfig): string {
  try {
    const { broker } = config;
    if (link === 'broker' && broker.kind === 'kafka') return redactUrl(broker.kafka.brokers.join(','));
    if (link === 'broker' && broker.kind === 'nats') return redactUrl(broker.nats.servers.join(','));
    const url = new URL(
      link === 'postgres' ? config.databaseUrl : link === 'redis' ? config.redisUrl : rabbitUrl(config),
    );
    return `${url.protocol}//${url.host}`;
  } catch {
    return 'unparseable URL';
  }
}

function rabbitUrl(config: PostboxConfig): string {
  return config.broker.kind === 'rabbitmq' ? config.broker.rabbitmq.url : '';
}

/**
 * Node's TLS errors by their text, for clients that keep only the message (amqp-client's AMQPError): the code
 * Node gives each.
 */
const TLS_MESSAGES: ReadonlyArray<[RegExp, string]> = [
  [/unable to verify the first certificate/i, 'UNABLE_TO_VERIFY_LEAF_SIGNATURE'],
  [/self[- ]signed certificate in certificate chain/i, 'SELF_SIGNED_CERT_IN_CHAIN'],
  [/unable to get local issuer certificate/i, 'UNABLE_TO_GET_ISSUER_CERT_LOCALLY'],
  [/does not match certificate's altnames/i, 'ERR_TLS_CERT_ALTNAME_INVALID'],
  [/certificate has expired/i, 'CERT_HAS_EXPIRED'],
];

/** The first error code along the cause chain (kafkajs wraps the socket's error twice). */
function codeOf(error: unknown): string | undefined {
  for (
    let e = error as { code?: unknown; cause?: unknown } | undefined, i = 0;
    e && i < 5;
    e = e.cause as typeof e, i++
  ) {
    if (typeof e.code === 'string' && /^[A-Z_]+$/.test(e.code)) return e.code;
  }
  const text = error instanceof Error ? error.message : String(error);
  return TLS_MESSAGES.find(([pattern]) => pattern.test(text))?.[1];
}

function messageOf(error: unknown): string {
  const text = error instanceof Error ? error.message : String(error);
  return text.replace(/^Connection error: /, '');
}
