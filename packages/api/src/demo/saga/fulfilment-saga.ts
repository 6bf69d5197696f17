// The demo's order-fulfilment saga (npm start): reserve stock → charge payment → ship, ship the pivot. The order
// service starts it in the transaction that places the order; the reply consumer and the timer runner move it.
import { defineSaga, type SagaDefinition } from '@postbox/engine/saga';
import type { TopicSpec } from '@postbox/engine/kafka';

export interface FulfilmentData {
  orderId: string;
  amountCents: number;
}

export const FULFILMENT_SAGA = 'demo-fulfilment';

/**
 * Short on purpose: an unanswered step is asked about after 3 s, so a new user sees resolved sagas within a
 * minute (a production flow would wait far longer). Ten questions (30 s) ride out a participant that restarts.
 */
const STEP_TIMEOUT_MS = 3000;
const STEP_ATTEMPTS = 10;
const DEADLINE_MS = 60_000;

export interface FulfilmentTopics {
  inventory: string;
  payments: string;
  shipping: string;
  replies: string;
}

/** The saga's topics under a prefix (default `demo`), so two demos can share one Kafka (tests do). */
export function fulfilmentTopics(prefix: string): FulfilmentTopics {
  return {
    inventory: `${prefix}.inventory.commands`,
    payments: `${prefix}.payments.commands`,
    shipping: `${prefix}.shipping.commands`,
    replies: `${prefix}.saga.replies`,
  };
}

/** The topics to create before the saga's consumers start (a group cannot join a topic that does not exist). */
export function fulfilmentTopicSpecs(prefix: string): TopicSpec[] {
  return Object.values(fulfilmentTopics(prefix)).map((topic) => ({ topic, partitions: 3 }));
}

/** The definition: the same in the order service and in the reply consumer, which both build it from the prefix. */
export function fulfilmentSaga(prefix: string): SagaDefinition<FulfilmentData> {
  const topics = fulfilmentTopics(prefix);
  const timing = { timeoutMs: STEP_TIMEOUT_MS, maxAttempts: STEP_ATTEMPTS };
  return defineSaga<FulfilmentData>({
    type: FULFILMENT_SAGA,
    version: 1,
    deadlineMs: DEADLINE_MS,
    replyTopic: topics.replies,
    steps: [
      {
        name: 'reserve',
        topic: topics.inventory,
        command: (d) => ({ type: 'inventory.reserve', data: { orderId: d.orderId, quantity: 1 } }),
        success: ['inventory.reserved'],
        failure: [],
        compensate: (d) => ({ type: 'inventory.release', data: { orderId: d.orderId } }),
        ...timing,
      },
      {
        name: 'charge',
        topic: topics.payments,
        command: (d) => ({ type: 'payments.charge', data: { orderId: d.orderId, amountCents: d.amountCents } }),
        success: ['payments.charged'],
        failure: ['payments.declined'],
        compensate: (d) => ({ type: 'payments.refund', data: { orderId: d.orderId } }),
        ...timing,
      },
      {
        name: 'ship',
        topic: topics.shipping,
        pivot: true,
        command: (d) => ({ type: 'shipping.ship', data: { orderId: d.orderId } }),
        success: ['shipping.shipped'],
        failure: [],
        ...timing,
      },
    ],
  });
}
