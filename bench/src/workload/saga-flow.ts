// The saga the bench runs: reserve → charge → ship (the pivot), every step applied by a participant that records
// one row, so a completed saga moves six events (three commands, three replies) through the whole pipeline.
// Topics come from POSTBOX_BENCH_SAGA_TOPICS (JSON), set by the scenario before its consumers load the handler
// modules (worker threads inherit the environment). Timeouts are long: the bench measures the happy path.
import { defineSaga, SagaOrchestrator } from '@postbox/engine/saga';

export interface BenchOrder {
  orderId: string;
}

export interface SagaTopics {
  inventory: string;
  payments: string;
  shipping: string;
  replies: string;
}

const configured = process.env.POSTBOX_BENCH_SAGA_TOPICS;
if (!configured) throw new Error('saga-flow.ts: POSTBOX_BENCH_SAGA_TOPICS is not set (the saga scenario sets it)');
export const sagaTopics = JSON.parse(configured) as SagaTopics;

const step = (name: string, topic: string, done: string, compensable: boolean) => ({
  name,
  topic,
  timeoutMs: 600_000,
  command: (d: BenchOrder) => ({ type: `${name}.do`, data: { orderId: d.orderId } }),
  success: [done],
  failure: [`${name}.refused`],
  ...(compensable ? { compensate: (d: BenchOrder) => ({ type: `${name}.undo`, data: { orderId: d.orderId } }) } : {}),
});

export const benchSaga = defineSaga<BenchOrder>({
  type: 'bench-fulfilment',
  version: 1,
  replyTopic: sagaTopics.replies,
  steps: [
    step('reserve', sagaTopics.inventory, 'reserve.done', true),
    step('charge', sagaTopics.payments, 'charge.done', true),
    { ...step('ship', sagaTopics.shipping, 'ship.done', false), pivot: true },
  ],
});

export const benchOrchestrator = new SagaOrchestrator([benchSaga]);
