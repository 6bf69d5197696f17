import type { Queryable } from '@postbox/engine';

export interface LostReply {
  eventId: string;
  sagaId: string;
  replyType: string;
  step: string;
  direction: string;
  attempt: number;
  reason: string;
}

/**
 * Records a reply the demo pretends never arrived, where Postbox records every reply that changed nothing
 * (saga_reply_ignored), so an operator sees why the saga had to ask. The engine's own recordIgnoredReply is not
 * part of its public entry points, hence this statement. Parameters: the reply. Locks: none.
 */
export async function recordLostReply(sql: Queryable, r: LostReply): Promise<void> {
  await sql`
    INSERT INTO saga_reply_ignored (event_id, saga_id, reply_type, step, direction, attempt, reason)
    VALUES (${r.eventId}, ${r.sagaId}, ${r.replyType}, ${r.step}, ${r.direction}, ${r.attempt}, ${r.reason})`;
}
