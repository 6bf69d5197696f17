import { Kafka, logLevel, type ISocketFactory, type SASLOptions } from 'kafkajs';
import type { ConnectionOptions } from 'node:tls';

/** Connection settings shared by the Kafka publisher, subscriber and admin. TLS and SASL pass through. */
export interface KafkaConnection {
  brokers: string[];
  /** @defaultValue 'postbox' */
  clientId?: string;
  ssl?: boolean | ConnectionOptions;
  sasl?: SASLOptions;
  /** @defaultValue 3000 */
  connectionTimeoutMs?: number;
  /** @defaultValue 10000 */
  requestTimeoutMs?: number;
}

/** `socketFactory`: a SocketFence's, for a client whose connections must be cut when it is abandoned. */
export function createKafka(connection: KafkaConnection, socketFactory?: ISocketFactory): Kafka {
  return new Kafka({
    ...(socketFactory ? { socketFactory } : {}),
    clientId: connection.clientId ?? 'postbox',
    brokers: connection.brokers,
    ...(connection.ssl === undefined ? {} : { ssl: connection.ssl }),
    ...(connection.sasl === undefined ? {} : { sasl: connection.sasl }),
    connectionTimeout: connection.connectionTimeoutMs ?? 3000,
    requestTimeout: connection.requestTimeoutMs ?? 10_000,
    // Within one call kafkajs may retry a request (the idempotent producer's sequence numbers make that
    // duplicate-free); across calls the relay's durable backoff is the only retry layer.
    retry: { retries: 3, initialRetryTime: 100, maxRetryTime: 1000 },
    // kafkajs logs every failed connection attempt at ERROR; Postbox reports failures itself.
    logLevel: logLevel.NOTHING,
  });
}

/** Parses "host:port,host:port". */
export function parseBrokers(list: string): string[] {
  return list
    .split(',')
    .map((b) => b.trim())
    .filter((b) => b.length > 0);
}
