import { defineConsumer, type ConsumerDefinition } from '@postbox/engine';
import { fulfilmentTopics } from './fulfilment-saga.ts';
import { type FulfilmentSettings, handlerUrl } from './settings.ts';

/**
 * The demo saga's four consumers: the three participant services and the order service's reply consumer. A few
 * events a second each, so one thread and one connection apiece (the CLI runs them inline: no threads at all).
 * Groups carry the prefix, so two demos on one Kafka never take each other's commands.
 */
export function fulfilmentConsumers(settings: FulfilmentSettings): ConsumerDefinition[] {
  const topics = fulfilmentTopics(settings.prefix);
  const consumer = (role: string, topic: string, file: string) =>
    defineConsumer({
      name: `demo-${role}`,
      groupId: `postbox.${settings.prefix}-${role}`,
      topics: [topic],
      handler: handlerUrl(file, settings),
      limits: { threads: 1, databasePoolSize: 1 },
    });
  return [
    consumer('inventory', topics.inventory, './inventory.handler.ts'),
    consumer('payments', topics.payments, './payments.handler.ts'),
    consumer('shipping', topics.shipping, './shipping.handler.ts'),
    consumer('saga-replies', topics.replies, './replies.handler.ts'),
  ];
}
