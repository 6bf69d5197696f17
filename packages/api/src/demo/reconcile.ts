// The demo's reconciliation registration (docs/reconciliation.md): its orders are the source of truth for the
// order events, and re-emitting an order's event is a command of the order service's own. Named in
// POSTBOX_RECONCILE_MODULES (`postbox reconcile`); the topic comes from the module URL's query (`?topic=…`),
// default the demo's `orders.events`, and the fulfilment saga's participants keep their step records here.
import { enqueue, type Tx } from '@postbox/engine';
import {
  defineParticipantRecords,
  defineReconcileSource,
  outboxHas,
  type ReconcileSource,
} from '@postbox/engine/reconcile';
import { FULFILMENT_SAGA } from './saga/fulfilment-saga.ts';

/** The event each order state was announced by (order-service.ts): the re-emit builds the same one. */
const EVENT_OF: Record<string, string> = {
  placed: 'OrderPlaced',
  paid: 'OrderPaid',
  shipped: 'OrderShipped',
  delivered: 'OrderDelivered',
};

export interface DemoOrderSourceOptions {
  topic: string;
  /** @defaultValue the consumers registered on the topic */
  consumers?: string[];
}

/** The demo orders as a source of truth: demo_order(order_id, version), its events re-emitted by the service. */
export function demoOrderSource(options: DemoOrderSourceOptions): ReconcileSource {
  return defineReconcileSource({
    aggregateType: 'demo-order',
    topic: options.topic,
    ...(options.consumers ? { consumers: options.consumers } : {}),
    // A keyset page on the primary key: no lock, no scan of what came before, whatever the number of orders.
    versions: (sql, afterId, limit) => sql<{ aggregate_id: string; version: string }[]>`
      SELECT order_id AS aggregate_id, version::text FROM demo_order
      ${afterId === null ? sql`` : sql`WHERE order_id > ${afterId}`}
      ORDER BY order_id LIMIT ${limit}`,
    reemit: (tx, orderId, version) => reemitOrderEvent(tx, options.topic, orderId, version),
  });
}

/**
 * The order service's idempotent command "announce this order at this version": under the order's row lock, the
 * event of the state it is in, unless the order moved on or the event is already in the outbox.
 */
export async function reemitOrderEvent(tx: Tx, topic: string, orderId: string, version: number): Promise<boolean> {
  const [order] = await tx<{ state: string; amount_cents: number; version: string }[]>`
    SELECT state, amount_cents, version::text FROM demo_order WHERE order_id = ${orderId} FOR UPDATE`;
  if (!order || Number(order.version) !== version || (await outboxHas(tx, orderId, version))) return false;
  const data =
    order.state === 'placed' ? { orderId, amountCents: order.amount_cents } : { orderId, state: order.state };
  await enqueue(
    tx,
    { event_type: EVENT_OF[order.state]!, aggregate_id: orderId, aggregate_version: version, data },
    { topic, producer: 'demo-orders' },
  );
  return true;
}

const topic = new URL(import.meta.url).searchParams.get('topic') ?? 'orders.events';

export const sources = [demoOrderSource({ topic })];

/**
 * The fulfilment saga's participants (inventory: reserve, payments: charge, shipping: ship) record their steps in
 * the demo database; a step whose participant recorded elsewhere would be left out of this list.
 */
export const participants = [
  defineParticipantRecords({ sagaType: FULFILMENT_SAGA, steps: ['reserve', 'charge', 'ship'] }),
];
