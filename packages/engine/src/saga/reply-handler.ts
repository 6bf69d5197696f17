import type { BatchHandler, Handler, HandlerWithBatch } from '../records/handler.ts';
import type { Envelope } from '../envelope/envelope.ts';
import { recordIgnoredReply } from '../queries/saga-reply-ignored.ts';
import { lockSagasInOrder } from '../queries/saga-timer.ts';
import { SAGA_EXTENSIONS, type SagaOrchestrator } from './orchestrator.ts';
import type { Direction } from '../records/saga-state.ts';

/**
 * The orchestrator's side of the replies: a consumer handler that turns each reply event into a transition, in
 * the consumer's transaction (its inbox row absorbs a duplicate delivery). A reply that is malformed is recorded
 * and dropped; it never blocks the sagas behind it.
 */
export function sagaReplyHandler(orchestrator: SagaOrchestrator): HandlerWithBatch {
  const one = applyReply(orchestrator);
  return Object.assign(one, { batch: inIdOrder(one) });
}

function applyReply(orchestrator: SagaOrchestrator): Handler {
  return async (event, tx) => {
    const x = (event as Envelope & { extensions?: Record<string, string> }).extensions ?? {};
    const sagaId = x[SAGA_EXTENSIONS.id];
    const step = x[SAGA_EXTENSIONS.step];
    const direction = x[SAGA_EXTENSIONS.direction];
    const attempt = Number(x[SAGA_EXTENSIONS.attempt]);
    if (!sagaId || !step || !isDirection(direction) || !Number.isInteger(attempt)) {
      await recordIgnoredReply(tx, {
        eventId: event.event_id,
        sagaId: sagaId ?? null,
        replyType: event.event_type,
        step: step ?? null,
        direction: direction ?? null,
        attempt: Number.isInteger(attempt) ? attempt : null,
        reason: 'malformed: saga extensions missing or invalid',
      });
      return;
    }
    await orchestrator.onReply(tx, {
      eventId: event.event_id,
      sagaId,
      step,
      direction,
      attempt,
      type: event.event_type,
      data: event.data,
    });
  };
}

/**
 * The batch form of sagaReplyHandler: it locks every saga of the batch in saga-id order first, then applies the
 * replies one by one in the batch's order, so two batches holding the same sagas never deadlock. sagaReplyHandler
 * carries it (a module exporting only `export default sagaReplyHandler(o)` gets it); a module that wraps the
 * handler (as the demo's lost replies do) exports it as `handleBatch` itself.
 */
export function sagaReplyBatchHandler(orchestrator: SagaOrchestrator): BatchHandler {
  return inIdOrder(applyReply(orchestrator));
}

function inIdOrder(one: Handler): BatchHandler {
  return async (batch, tx) => {
    const ids = new Set<string>();
    for (const { event } of batch) {
      const id = (event as Envelope & { extensions?: Record<string, string> }).extensions?.[SAGA_EXTENSIONS.id];
      if (id && UUID.test(id)) ids.add(id.toLowerCase());
    }
    await lockSagasInOrder(tx, [...ids]);
    for (const { event, context } of batch) await one(event, tx, context);
  };
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function isDirection(value: string | undefined): value is Direction {
  return value === 'forward' || value === 'query' || value === 'compensate';
}
