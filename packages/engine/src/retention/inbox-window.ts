import type { Sql } from '../db/connect.ts';
import { PostboxError } from '../errors.ts';
import type { TopicRetention } from '../ports/offsets.ts';
import { registeredTopics } from '../queries/consumer-registry.ts';
import { inboxWindowRefusal, type InboxWindowRefusal } from './broker-retention.ts';
import type { RetentionPolicy } from './policy.ts';

/**
 * The inbox window against the broker's retention of every topic a registered consumer reads. Returns the
 * refusal, or null when it fits or no check was asked for. A broker that cannot say is a refusal too: nothing is
 * dropped on a guess.
 */
export async function checkInboxWindow(
  sql: Sql,
  o: { policy: RetentionPolicy; brokerRetention?: (topics: string[]) => Promise<TopicRetention[]> },
): Promise<InboxWindowRefusal | null> {
  if (!o.brokerRetention || o.policy.inboxDays === null) return null;
  const topics = await registeredTopics(sql);
  let retention: TopicRetention[];
  try {
    retention = await o.brokerRetention(topics);
  } catch (cause) {
    return {
      topic: topics.join(', '),
      retentionMs: null,
      reason: `cannot read the broker's retention of ${topics.join(', ')}: ${(cause as Error).message}`,
    };
  }
  return inboxWindowRefusal(o.policy, retention);
}

/** The policy does not fit the broker: nothing was taken out (code retention_refused; the CLI exits 2). */
export class RetentionRefusedError extends PostboxError {
  readonly refusal: InboxWindowRefusal;
  constructor(refusal: InboxWindowRefusal) {
    super('retention_refused', 'permanent', `retention refused: ${refusal.reason}`);
    this.refusal = refusal;
  }
}
