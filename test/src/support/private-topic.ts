import { Kafka, logLevel } from 'kafkajs';
import type { PrivateStack } from './private-stack.ts';

/** Creates a topic on the stack's broker (through its proxy, if any). */
export async function createPrivateTopic(
  stack: PrivateStack,
  topic: string,
  partitions: number,
  configEntries: Array<{ name: string; value: string }> = [],
): Promise<void> {
  const admin = new Kafka({
    clientId: 'postbox-test-admin',
    brokers: [stack.urls.KAFKA_BROKERS!],
    logLevel: logLevel.NOTHING,
  }).admin();
  await admin.connect();
  try {
    await admin.createTopics({
      waitForLeaders: true,
      topics: [{ topic, numPartitions: partitions, replicationFactor: 1, configEntries }],
    });
  } finally {
    await admin.disconnect();
  }
}
