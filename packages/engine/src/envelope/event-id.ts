import { v7 } from 'uuid';

/** A new UUIDv7: time-ordered, so outbox and inbox primary keys stay append-friendly in their B-trees. */
export function newEventId(): string {
  return v7();
}
