import type { BatchHandler, Envelope, Handler, Tx } from '@postbox/engine';
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
    if (isLost(event, share)) await recordLost(tx, event);
    else await handler(event, tx, context);
  };
}

/** The same for the batch handler: the lost replies are recorded, the others go on to `handler` together. */
export function losingReplyBatches(handler: BatchHandler, share: number): BatchHandler {
  if (share <= 0) return handler;
  return async (batch, tx) => {
    const kept = [];
    for (const item of batch) {
      if (isLost(item.event, share)) await recordLost(tx, item.event);
      else kept.push(item);
    }
    if (kept.length > 0) await handler(kept, tx);
  };
}

function isLost(event: Envelope, share: number): boolean {
  const x = event.extensions ?? {};
  const sagaId = x[SAGA_EXTENSIONS.id];
  const step = x[SAGA_EXTENSIONS.step];
  return (
    !!sagaId &&
    !!step &&
    x[SAGA_EXTENSIONS.direction] === 'forward' &&
    Number(x[SAGA_EXTENSIONS.attempt]) === 1 &&
    inShare(`lost:${sagaId}:${step}`, share)
  );
}

/** Recorded where Postbox records every reply that changed nothing, so an operator sees why the saga asked. */
async function recordLost(tx: Tx, event: Envelope): Promise<void> {
  const x = event.extensions ?? {};
  await recordIgnoredReply(tx, {
    eventId: event.event_id,
    sagaId: x[SAGA_EXTENSIONS.id]!,
    replyType: event.event_type,
    step: x[SAGA_EXTENSIONS.step]!,
    direction: 'forward',
    attempt: 1,
    reason: LOST_REPLY_REASON,
  });
}
