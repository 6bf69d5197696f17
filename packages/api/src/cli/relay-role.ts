import { connect, createLogger, ensureTopics, inlineExecutor, KafkaPublisher, Relay, backoffDelayMs, type Logger, type Sql } from '@postbox/engine';
import { createPublishPool } from '@postbox/workers';
import type { PostboxConfig } from '../config/env.ts';

/**
 * Starts a relay for the configured topics: topics created first (retried with backoff while Kafka is down:
 * the relay never relies on auto-create), then the relay with a worker pool (or on this thread when threads=0).
 */
export async function startRelay(config: PostboxConfig, sql: Sql, log: Logger, signal: AbortSignal): Promise<Relay | null> {
  for (let attempt = 0; !signal.aborted; attempt++) {
    try {
      await ensureTopics(config.kafka, config.topics);
      break;
    } catch (cause) {
      const delay = Math.max(250, backoffDelayMs(attempt));
      log.warn({ err: (cause as Error).message, retryInMs: delay }, 'kafka not ready; will create topics when it is');
      await new Promise((r) => setTimeout(r, delay));
    }
  }
  if (signal.aborted) return null;
  const executor =
    config.relayThreads === 0
      ? inlineExecutor({ sql, publisher: new KafkaPublisher(config.kafka), options: config.relay })
      : createPublishPool({ databaseUrl: config.databaseUrl, kafka: config.kafka, relay: config.relay, threads: config.relayThreads });
  const relay = new Relay({ sql, executor, options: config.relay, log });
  await relay.start();
  return relay;
}

export function relaySql(config: PostboxConfig): Sql {
  return connect({ url: config.databaseUrl, max: 4, applicationName: 'postbox-relay' });
}

export { createLogger };
