import type { Queryable } from '../db/connect.ts';

export interface IgnoredReply {
  eventId: string;
  sagaId: string | null;
  replyType: string;
  step: string | null;
  direction: string | null;
  attempt: number | null;
  reason: string;
}

/** Records a reply that changed nothing (stale, unknown saga, malformed). Parameters: the reply. Locks: none. */
export async function recordIgnoredReply(sql: Queryable, r: IgnoredReply): Promise<void> {
  await sql`
    INSERT INTO saga_reply_ignored (event_id, saga_id, reply_type, step, direction, attempt, reason)
    VALUES (${r.eventId}, ${r.sagaId}, ${r.replyType}, ${r.step}, ${r.direction}, ${r.attempt}, ${r.reason})`;
}
