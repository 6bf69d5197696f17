import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { Redis, type RedisOptions } from 'ioredis';
import { ConfigError } from '../../errors.ts';

/**
 * Every Redis connection of Postbox, from its URL. `rediss://` is TLS, verified against the system's CAs, or
 * against the CA file the URL names as `sslrootcert` (PostgreSQL's name for it:
 * `rediss://postbox:…@localhost:16380/?sslrootcert=/etc/postbox/ca.pem`). The certificate must be issued for the
 * URL's host name. An ACL user and password are the URL's user info, as ioredis reads them.
 */
export function redisConnection(url: string, options: RedisOptions = {}): Redis {
  const { url: plain, tls } = redisTls(url);
  return new Redis(plain, { ...options, ...(tls ? { tls } : {}) });
}

/** The URL without `sslrootcert`, and the TLS options it asks for (none for `redis://`). */
export function redisTls(url: string): { url: string; tls?: RedisOptions['tls'] } {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch (cause) {
    throw new ConfigError('REDIS_URL is not a URL (redis://host:port or rediss://user:password@host:port)', { cause });
  }
  const caFile = parsed.searchParams.get('sslrootcert');
  parsed.searchParams.delete('sslrootcert');
  if (parsed.protocol !== 'rediss:') {
    if (caFile) throw new ConfigError('REDIS_URL names sslrootcert but is not rediss:// (TLS)');
    return { url };
  }
  // SNI carries names only; an IP is still checked against the certificate's addresses.
  const tls: NonNullable<RedisOptions['tls']> = isIP(parsed.hostname) ? {} : { servername: parsed.hostname };
  if (caFile) {
    try {
      tls.ca = readFileSync(caFile, 'utf8');
    } catch (cause) {
      throw new ConfigError(`REDIS_URL's sslrootcert ${caFile} cannot be read`, { cause });
    }
  }
  return { url: parsed.toString(), tls };
}
