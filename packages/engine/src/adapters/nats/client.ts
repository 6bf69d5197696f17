import { connect, type NatsConnection } from '@nats-io/transport-node';
import { natsInboxPrefix } from '../../migrate/broker-permissions.ts';

/** Connection settings shared by the NATS publisher, subscriber and stream setup. */
export interface NatsConnectionOptions {
  /** `host:port` or `nats://host:port`, one or more. */
  servers: string[];
  /** Shown in the server's connection list. @defaultValue 'postbox' */
  name?: string;
  /** @defaultValue 3000 */
  connectTimeoutMs?: number;
  /**
   * TLS required, verified against this CA (PEM) or the system's when empty; the server's certificate must be
   * issued for the host dialled. @defaultValue none: TLS only when the server requires it
   */
  tls?: { ca?: string };
}

/**
 * Opens a connection that reconnects by itself for ever (every 500 ms): a publisher or subscriber rides out a
 * server restart, and what it sends meanwhile fails by its own deadline rather than queueing without bound.
 * A server URL may carry a user and password (`tls://user:pass@host:port`, as NATS' own tools take them): the
 * client logs in as that user, with its replies and pull deliveries under the user's own inbox prefix
 * (`_INBOX_<user>`), so a user's permissions can allow its own inboxes and no one else's
 * (migrate/broker-permissions.ts).
 */
export function connectNats(options: NatsConnectionOptions): Promise<NatsConnection> {
  const credentials = natsCredentials(options.servers);
  return connect({
    servers: options.servers.map((s) => s.replace(/^(nats|tls):\/\//, '').replace(/^[^@/]*@/, '')),
    ...(credentials
      ? { user: credentials.user, pass: credentials.pass, inboxPrefix: natsInboxPrefix(credentials.user) }
      : {}),
    name: options.name ?? 'postbox',
    timeout: options.connectTimeoutMs ?? 3000,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 500,
    // Requests made while disconnected wait for the reconnect, within their own timeout.
    waitOnFirstConnect: false,
    ...(options.tls ? { tls: options.tls.ca ? { ca: options.tls.ca } : {} } : {}),
  });
}

/** The user and password the first server URL carrying them names (URL-encoded there), if any. */
export function natsCredentials(servers: readonly string[]): { user: string; pass: string } | undefined {
  for (const s of servers) {
    const at = /^(?:(?:nats|tls):\/\/)?([^@/]*)@/.exec(s);
    if (!at) continue;
    const [user = '', pass = ''] = at[1]!.split(':');
    return { user: decodeURIComponent(user), pass: decodeURIComponent(pass) };
  }
  return undefined;
}

/** Parses "host:port,nats://host:port". */
export function parseNatsServers(list: string): string[] {
  return list
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
}
