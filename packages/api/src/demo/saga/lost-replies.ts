import type { Handler } from '@postbox/engine';
import { recordIgnoredReply, SAGA_EXTENSIONS } from '@postbox/engine/saga';
import { inShare } from './share.ts';

export const LOST_REPLY_REASON = 'demo: reply lost (POSTBOX_DEMO_LOST_REPLIES)';

/**
 * Wraps the orchestrator's reply handler to lose a share of replies, as a network or a crashed participant would:
 * the reply is recorded as ignored and not applied, the step's timeout fires, the saga asks the participant
 * (resolving), and goes on with its answer. Only the first forward reply of a step can be lost, chosen by a hash
 * of (saga, step): the query's answer always arrives, so a saga cannot be stuck asking for ever.
 */
export function losingReplies(handler: Handler, share: number): Handler {
  if (share <= 0) return handler;
  return async (event, tx, context) => {
    const x = event.extensions ?? {};
    const sagaId = x[SAGA_EXTENSIONS.id];
    const step = x[SAGA_EXTENSIONS.step];
    const direction = x[SAGA_EXTENSIONS.direction];
    const attempt = Number(x[SAGA_EXTENSIONS.attempt]);
    if (sagaId && step && direction === 'forward' && attempt === 1 && inShare(`lost:${sagaId}:${step}`, share)) {
      // Recorded where Postbox records every reply that changed nothing, so an operator sees why the saga asked.
      await recordIgnoredReply(tx, {
        eventId: event.event_id,
        sagaId,
        replyType: event.event_type,
        step,
        direction,
        attempt,
        reason: LOST_REPLY_REASON,
      });
      return;
    }
    await handler(event, tx, context);
  };
}
