import { ConfigError } from '../../errors.ts';

/** The subscriber's fetch and group timings, as the caller may set them (KafkaSubscriberOptions). */
export interface SubscriberTimings {
  sessionTimeoutMs?: number | undefined;
  heartbeatIntervalMs?: number | undefined;
  maxBytesPerPartition?: number | undefined;
  maxBytes?: number | undefined;
  maxWaitMs?: number | undefined;
}

/**
 * The least fetch wait accepted: kafkajs sleeps it in a loop while every partition is paused, so 0 would spin the
 * main thread and poll the broker without pause.
 */
export const MIN_MAX_WAIT_MS = 10;

/** The group timings when the caller sets none (kafkajs' own defaults). */
export const DEFAULT_SESSION_TIMEOUT_MS = 30_000;
export const DEFAULT_HEARTBEAT_INTERVAL_MS = 3000;

/**
 * Checks the subscriber's numeric options: whole numbers, positive, `maxWaitMs` at least MIN_MAX_WAIT_MS and the
 * heartbeat inside the session (either one's default counts when only the other is set). Throws a ConfigError naming the option and the value it was given.
 */
export function checkSubscriberTimings(options: SubscriberTimings): void {
  const positive = ['sessionTimeoutMs', 'heartbeatIntervalMs', 'maxBytesPerPartition', 'maxBytes'] as const;
  for (const name of positive) {
    const value = options[name];
    if (value !== undefined && (!Number.isSafeInteger(value) || value < 1))
      throw new ConfigError(`KafkaSubscriber: ${name} must be a whole number ≥ 1, got ${String(value)}`);
  }
  const wait = options.maxWaitMs;
  if (wait !== undefined && (!Number.isSafeInteger(wait) || wait < MIN_MAX_WAIT_MS))
    throw new ConfigError(
      `KafkaSubscriber: maxWaitMs must be a whole number ≥ ${MIN_MAX_WAIT_MS} (kafkajs sleeps it in a loop while every partition is paused), got ${String(wait)}`,
    );
  // Compared as they will run, defaults included: a session of 2 s alone would otherwise meet the 3 s heartbeat.
  const session = options.sessionTimeoutMs ?? DEFAULT_SESSION_TIMEOUT_MS;
  const heartbeat = options.heartbeatIntervalMs ?? DEFAULT_HEARTBEAT_INTERVAL_MS;
  if (heartbeat >= session)
    throw new ConfigError(
      `KafkaSubscriber: heartbeatIntervalMs (${heartbeat}) must be below sessionTimeoutMs (${session}), or the group drops the member between two heartbeats`,
    );
}
