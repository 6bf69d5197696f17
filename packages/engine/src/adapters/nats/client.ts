import { connect, type NatsConnection } from '@nats-io/transport-node';

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
 */
export function connectNats(options: NatsConnectionOptions): Promise<NatsConnection> {
  return connect({
    servers: options.servers.map((s) => s.replace(/^(nats|tls):\/\//, '')),
    name: options.name ?? 'postbox',
    timeout: options.connectTimeoutMs ?? 3000,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 500,
    // Requests made while disconnected wait for the reconnect, within their own timeout.
    waitOnFirstConnect: false,
    ...(options.tls ? { tls: options.tls.ca ? { ca: options.tls.ca } : {} } : {}),
  });
}

/** Parses "host:port,nats://host:port". */
export function parseNatsServers(list: string): string[] {
  return list
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
}
