import type { PrivateServer } from '@postbox/stack';
import { KafkaOffsets, KafkaTopicReader } from '@postbox/engine/kafka';
import { ensureStreams, NatsOffsets, NatsTopicReader } from '@postbox/engine/nats';
import { ensureExchanges, RabbitOffsets, RabbitTopicReader } from '@postbox/engine/rabbitmq';
import { createPrivateTopic, startPrivateStack, type PrivateStack } from './private-stack.ts';
import type { VerifyBroker } from './verified.ts';

/** The brokers the fault scenarios that kill or stop the broker run on (`npm run test:faults -- --broker`). */
export const FAULT_BROKERS = ['kafka', 'nats', 'rabbitmq'] as const;
export type FaultBrokerKind = (typeof FAULT_BROKERS)[number];

/** The broker of this run: POSTBOX_FAULT_BROKER (set by run-faults' --broker), Kafka when unset. */
export function faultBrokerKind(): FaultBrokerKind {
  const kind = (process.env.POSTBOX_FAULT_BROKER ?? 'kafka').toLowerCase();
  if (!(FAULT_BROKERS as readonly string[]).includes(kind))
    throw new Error(`POSTBOX_FAULT_BROKER must be one of ${FAULT_BROKERS.join(', ')}, got "${kind}"`);
  return kind as FaultBrokerKind;
}

/** A private broker of one kind for a fault scenario: its server to kill, what roles need to reach it, its verifier. */
export interface FaultBroker {
  kind: FaultBrokerKind;
  server: PrivateServer;
  /** POSTBOX_BROKER and the URL variables for spawned roles. */
  env: Record<string, string>;
  /** Makes a topic; on RabbitMQ with the queues of `groups` (they must be there before anything is published). */
  createTopic(topic: string, partitions: number, groups: string[]): Promise<void>;
  verifier(): VerifyBroker;
  stop(): Promise<void>;
}

export async function startFaultBroker(kind: FaultBrokerKind = faultBrokerKind()): Promise<FaultBroker> {
  return faultBrokerOf(await startPrivateStack(kind === 'kafka' ? { kafka: {} } : { [kind]: true }), kind);
}

/** The broker of `kind` a private stack started (with `kafka`, `nats` or `rabbitmq`); `stop()` stops the stack. */
export function faultBrokerOf(stack: PrivateStack, kind: FaultBrokerKind): FaultBroker {
  const partitions = new Map<string, number>();
  const base = { kind, stop: () => stack.stop() };
  if (kind === 'kafka') {
    const brokers = stack.urls.KAFKA_BROKERS!;
    const kafka = { brokers: brokers.split(','), clientId: 'postbox-test-verify' };
    return {
      ...base,
      server: stack.kafka!,
      env: { POSTBOX_BROKER: 'kafka', KAFKA_BROKERS: brokers },
      createTopic: (topic, count) => createPrivateTopic(stack, topic, count),
      verifier: () => ({
        reader: new KafkaTopicReader({ ...kafka, timeoutMs: 60_000 }),
        offsets: new KafkaOffsets(kafka),
      }),
    };
  }
  if (kind === 'nats') {
    const servers = [stack.nats!.url];
    return {
      ...base,
      server: stack.nats!,
      env: { POSTBOX_BROKER: 'nats', NATS_URL: servers[0]!, KAFKA_BROKERS: '127.0.0.1:1' },
      createTopic: async (topic, count) => {
        await ensureStreams({ servers }, [{ topic, partitions: count }]);
      },
      verifier: () => ({
        reader: new NatsTopicReader({ servers, timeoutMs: 60_000 }),
        offsets: new NatsOffsets({ servers }),
      }),
    };
  }
  const url = stack.rabbitmq!.url;
  return {
    ...base,
    server: stack.rabbitmq!,
    env: { POSTBOX_BROKER: 'rabbitmq', RABBITMQ_URL: url, KAFKA_BROKERS: '127.0.0.1:1' },
    createTopic: async (topic, count, groups) => {
      await ensureExchanges({ url }, [{ topic, partitions: count }], groups);
      partitions.set(topic, count);
    },
    verifier: () => ({ reader: new RabbitTopicReader(), offsets: new RabbitOffsets({ url, partitions }) }),
  };
}
