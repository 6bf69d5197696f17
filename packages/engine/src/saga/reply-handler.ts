import type { BatchHandler, Handler } from '../records/handler.ts';
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
export function sagaReplyHandler(orchestrator: SagaOrchestrator): Handler {
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
 * The batch form of sagaReplyHandler, for the reply consumer's handler module (`export const handleBatch =
 * sagaReplyBatchHandler(orchestrator)` beside the default export): it locks every saga of the batch in saga-id
 * order first, then applies the replies one by one in the batch's order. Without it the batch's replies lock their
 * sagas in the order they come, and two batches holding the same sagas in different orders can deadlock.
 */
export function sagaReplyBatchHandler(orchestrator: SagaOrchestrator): BatchHandler {
  const one = sagaReplyHandler(orchestrator);
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
