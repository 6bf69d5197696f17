import { defineConsumer, siblingModule, type ConsumerDefinition, type ConsumerLimits } from '@postbox/engine';

export const DEMO_CONSUMER = 'demo-order-projection';

/** The demo consumer: order events → demo_order_projection (see projection-handler.ts). */
export function demoProjectionConsumer(topic: string, limits: Partial<ConsumerLimits> = {}): ConsumerDefinition {
  return defineConsumer({
    name: DEMO_CONSUMER,
    topics: [topic],
    handler: siblingModule('./projection-handler.ts', import.meta.url),
    limits,
  });
}
