import { ConfigError, connect, silentLogger, type Logger } from '@postbox/engine';
import type { TopicSpec } from '@postbox/engine/kafka';
import { backoffDelayMs, inlineExecutor, Relay, type RelayOptions } from '@postbox/engine/runtime';
import { createPublisher, ensureBrokerTopics, type BrokerConnection } from '../broker.ts';
import { createPublishPool } from '../pools.ts';
import { abortableDelay } from './start-when-ready.ts';

/** What a relay needs to run in a service: where the outbox and the broker are, and how to run. */
export interface RelayRuntimeOptions {
  databaseUrl: string;
  broker: BrokerConnection;
  /** Topics (Kafka) or streams (NATS) created when missing before the relay starts: never broker auto-create. */
  topics: TopicSpec[];
  relay: RelayOptions;
  /** Publish worker threads, each with its own producer; 0 publishes on the calling thread. @defaultValue 0 */
  threads?: number;
  log?: Logger;
  /** Aborting it during start-up (the broker not ready yet) gives up: `startRelay` resolves null. */
  signal?: AbortSignal;
}

/**
 * Cycles on the main thread by default. On every broker, in every bench run on a 2-core machine shared with
 * PostgreSQL and the broker, the main thread relayed as much as or more than 1, 2 or 4 pool threads did, in about
 * 100 MiB less resident memory (bench/RESULTS.md, 2026-12-06). Threads pay off when the relay has cores of its
 * own: its publishing is one thread's CPU (kafkajs encodes records in JavaScript).
 */
export const DEFAULT_RELAY_THREADS = 0;

/** A started relay and the resources it owns; `stop()` finishes in-flight batches, hands back lanes, closes. */
export interface RunningRelay {
  relay: Relay;
  stop(): Promise<void>;
}

/**
 * Starts a relay for the configured topics: topics created first (retried with backoff while the broker is down),
 * then the relay with its own PostgreSQL pool and a worker pool (or on this thread when threads = 0).
 * Resolves null when `signal` aborted before it could start; nothing is left open then.
 */
export async function startRelay(options: RelayRuntimeOptions): Promise<RunningRelay | null> {
  const log = options.log ?? silentLogger;
  const partitions = await topicsReady(options, log);
  if (!partitions) return null;
  const sql = connect({ url: options.databaseUrl, max: 4, applicationName: 'postbox-relay' });
  const threads = options.threads ?? DEFAULT_RELAY_THREADS;
  const executor =
    threads === 0
      ? inlineExecutor({ sql, publisher: createPublisher(options.broker, partitions, 'relay'), options: options.relay })
      : createPublishPool({
          databaseUrl: options.databaseUrl,
          broker: options.broker,
          partitions,
          relay: options.relay,
          threads,
        });
  const relay = new Relay({ sql, executor, options: options.relay, log });
  const stop = async () => {
    try {
      await relay.stop();
    } finally {
      await sql.end({ timeout: 5 });
    }
  };
  if (options.broker.kind === 'kafka')
    log.info({ kafkaPublisher: options.broker.publisher ?? 'kafkajs', threads }, 'relay publishes to Kafka');
  try {
    await relay.start();
  } catch (cause) {
    await stop().catch(() => {});
    throw cause;
  }
  return { relay, stop };
}

/**
 * Creates the topics that are missing, retrying with backoff while the broker is not ready; false when `signal`
 * aborted first. Consumers of a new topic start after this (a group cannot join a topic that does not exist).
 */
export async function awaitTopics(
  options: Pick<RelayRuntimeOptions, 'broker' | 'topics' | 'log' | 'signal'>,
): Promise<boolean> {
  return (await topicsReady(options, options.log ?? silentLogger)) !== null;
}

async function topicsReady(
  options: Pick<RelayRuntimeOptions, 'broker' | 'topics' | 'signal'>,
  log: Logger,
): Promise<Map<string, number> | null> {
  for (let attempt = 0; !options.signal?.aborted; attempt++) {
    try {
      return await ensureBrokerTopics(options.broker, options.topics);
    } catch (cause) {
      // A misconfiguration (a stream that drifted, a topic that cannot be a subject) does not heal by waiting.
      if (cause instanceof ConfigError) throw cause;
      const delay = Math.max(250, backoffDelayMs(attempt));
      if (attempt === 0 || attempt % 10 === 0) {
        log.warn(
          { err: (cause as Error).message, retryInMs: delay, attempt },
          `${options.broker.kind} not ready; will create topics when it is`,
        );
      }
      await abortableDelay(delay, options.signal);
    }
  }
  return null;
}
