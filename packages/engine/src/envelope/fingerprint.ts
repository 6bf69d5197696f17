import { createHash } from 'node:crypto';
import { extensionsOf } from './extensions.ts';

/** What of a broker record makes the event itself (CloudEvents binary mode, see relay/record.ts). */
export interface FingerprintInput {
  key: string | null;
  value: Uint8Array | null;
  headers: Record<string, string>;
}

/**
 * A digest of an event's content: its value bytes and the attributes that say what it is (type, schema version,
 * subject, aggregate version, and its extension attributes — a saga's `sagaid` or `replyto` is part of what the
 * command means) and its key. Re-sends of one outbox row (relay retries, redelivery, replay of the
 * stored bytes) have the same fingerprint; another payload under the same event_id has a different one, which
 * is how a conflict is told from a duplicate. 16 bytes of SHA-256: collisions are not a practical concern.
 */
export function fingerprint(record: FingerprintInput): Buffer {
  const h = record.headers;
  const hash = createHash('sha256');
  for (const part of [
    record.key ?? '\u0000',
    h.type ?? '',
    h.schemaversion ?? '',
    h.subject ?? '',
    h.aggregateversion ?? '',
  ]) {
    hash.update(part);
    hash.update('\u0000');
  }
  // Only when there are any, in name order: an event without extensions keeps the digest it had before them, so
  // the fingerprints already in message_inbox still match their redeliveries.
  const extensions = extensionsOf(h);
  if (extensions) {
    for (const name of Object.keys(extensions).sort()) {
      hash.update(`${name}\u0000${extensions[name]}\u0000`);
    }
  }
  if (record.value) hash.update(record.value);
  return hash.digest().subarray(0, 16);
}
