import { ConfigError } from '@postbox/engine';
import { developmentStack } from '../cli/dev-stack.ts';
import { enforceLinkSecurity } from './link-security.ts';

/** Where Postbox's links point: the variables every command reads. */
export interface LinkEnv {
  DATABASE_URL: string;
  REDIS_URL: string;
  KAFKA_BROKERS: string;
  /** Used when POSTBOX_BROKER=nats. */
  NATS_URL: string;
  /** Used when POSTBOX_BROKER=rabbitmq. */
  RABBITMQ_URL: string;
}

const LINK_VARIABLES = ['DATABASE_URL', 'REDIS_URL', 'KAFKA_BROKERS', 'NATS_URL', 'RABBITMQ_URL'] as const;

/** The brokers the relay and consumers can use; POSTBOX_BROKER picks one. */
export const BROKER_KINDS = ['kafka', 'nats', 'rabbitmq'] as const;
export type BrokerKind = (typeof BROKER_KINDS)[number];

/** POSTBOX_BROKER, checked: unset means kafka. */
export function brokerKind(env: NodeJS.ProcessEnv = process.env): BrokerKind {
  const value = env.POSTBOX_BROKER?.trim().toLowerCase() || 'kafka';
  if ((BROKER_KINDS as readonly string[]).includes(value)) return value as BrokerKind;
  throw new ConfigError(
    `POSTBOX_BROKER=${JSON.stringify(env.POSTBOX_BROKER)} is not a broker Postbox can use: use ${BROKER_KINDS.slice(0, -1).join(', ')} or ${BROKER_KINDS.at(-1)}`,
  );
}

/**
 * The link variables that are set; inside the repository, the development stack's local addresses fill the rest
 * (as `npm start` expects). An installed Postbox has no development stack: what is unset stays empty, and the
 * command that needs it says so ({@link requireLink}). An unset REDIS_URL means no durable retry schedule.
 * Every command reads its links here, so here an insecure link stops it (link-security.ts): TLS that does not
 * verify the server, or a password sent in clear off this machine, unless POSTBOX_ALLOW_INSECURE names the link
 * — then each allowed one is a warning line on stderr, at every start.
 */
export async function linkEnv(env: NodeJS.ProcessEnv = process.env, warn?: (line: string) => void): Promise<LinkEnv> {
  const links = await resolveLinks(env);
  enforceLinkSecurity(links, brokerKind(env), env, warn);
  return links;
}

async function resolveLinks(env: NodeJS.ProcessEnv): Promise<LinkEnv> {
  const set = Object.fromEntries(LINK_VARIABLES.map((name) => [name, env[name] || ''])) as unknown as LinkEnv;
  if (LINK_VARIABLES.every((name) => set[name])) return set;
  const stack = await developmentStack();
  if (!stack) return set;
  const local = stack.stackEnv();
  return Object.fromEntries(LINK_VARIABLES.map((name) => [name, set[name] || local[name]])) as unknown as LinkEnv;
}

/** A link's value, or a ConfigError naming the variable to set. */
export function requireLink(links: Partial<LinkEnv>, name: keyof LinkEnv, what: string): string {
  const value = links[name];
  if (value) return value;
  throw new ConfigError(
    `${name} is not set: ${what}. (Inside the Postbox repository the development stack supplies it; an installed Postbox reads it from the environment.)`,
  );
}

/** Why a command that schedules retries needs Redis. */
export const REDIS_NEED = 'the Redis of the retry schedule (replays and repairs are scheduled there)';
