import { ConfigError } from '@postbox/engine';

type StackModule = typeof import('@postbox/stack');

/**
 * `@postbox/stack` when this is the repository, else undefined: the development stack (embedded PostgreSQL, the
 * Kafka jars) is a development dependency, never part of an installed Postbox, so it is loaded only on demand.
 */
export async function developmentStack(): Promise<StackModule | undefined> {
  try {
    return await import('@postbox/stack');
  } catch (err) {
    if (isMissing(err, '@postbox/stack')) return undefined;
    throw err;
  }
}

/** The development stack for `command`, or a ConfigError saying it is not part of an installed Postbox. */
export async function loadStack(command: string): Promise<StackModule> {
  const stack = await developmentStack();
  if (stack) return stack;
  throw new ConfigError(
    `postbox ${command} runs the development stack (embedded PostgreSQL, Redis, Kafka), which is not part of an installed Postbox: run your own servers and set DATABASE_URL, REDIS_URL and KAFKA_BROKERS (or NATS_URL / RABBITMQ_URL with POSTBOX_BROKER)`,
  );
}

function isMissing(err: unknown, specifier: string): boolean {
  const e = err as { code?: string; message?: string } | undefined;
  return e?.code === 'ERR_MODULE_NOT_FOUND' && typeof e.message === 'string' && e.message.includes(specifier);
}
