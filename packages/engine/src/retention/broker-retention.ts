import type { RetentionPolicy } from './policy.ts';
import type { TopicRetention } from '../ports/offsets.ts';

/** Why an inbox window is refused: the topic whose records outlive it, in an operator's words. */
export interface InboxWindowRefusal {
  topic: string;
  /** The topic's effective retention in ms (null: forever). */
  retentionMs: number | null;
  reason: string;
}

const DAY_MS = 86_400_000;

/**
 * The inbox must keep a row at least as long as the broker can deliver its event again: a redelivery after the
 * row is gone would be applied twice (the version gate still stops a version at or below the last applied, but
 * not a re-ordered one). Returns the refusal for the topic that outlives the window most, or null when every topic
 * fits (an inbox kept forever fits any).
 */
export function inboxWindowRefusal(
  policy: Pick<RetentionPolicy, 'inboxDays'>,
  topics: readonly TopicRetention[],
): InboxWindowRefusal | null {
  if (policy.inboxDays === null) return null;
  const windowMs = policy.inboxDays * DAY_MS;
  const longest = [...topics].sort((a, b) => (b.retentionMs ?? Infinity) - (a.retentionMs ?? Infinity))[0];
  if (!longest || (longest.retentionMs !== null && longest.retentionMs <= windowMs)) return null;
  const kept = longest.retentionMs === null ? 'forever' : `${days(longest.retentionMs)} d`;
  return {
    topic: longest.topic,
    retentionMs: longest.retentionMs,
    reason:
      `inbox window ${days(windowMs)} d < topic ${longest.topic}: records kept ${kept} (${longest.source}); ` +
      'a redelivery after its inbox row is gone would be applied again. Set POSTBOX_INBOX_RETENTION_DAYS ≥ ' +
      `${longest.retentionMs === null ? 'forever' : Math.ceil(longest.retentionMs / DAY_MS)} or shorten the topic's retention`,
  };
}

function days(ms: number): string {
  const d = ms / DAY_MS;
  return Number.isInteger(d) ? String(d) : d.toFixed(2);
}
