import type { Handler } from '../consumer/handler.ts';
import type { Envelope } from '../envelope/envelope.ts';
import { recordIgnoredReply } from '../queries/saga-reply-ignored.ts';
import { SAGA_EXTENSIONS, type SagaOrchestrator } from './orchestrator.ts';
import type { Direction } from './state.ts';

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

function isDirection(value: string | undefined): value is Direction {
  return value === 'forward' || value === 'query' || value === 'compensate';
}
