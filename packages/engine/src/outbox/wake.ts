import type { Sql } from '../db/connect.ts';

/** The channel relays LISTEN on. The payload is empty: a nudge says "look", never "what". */
export const WAKE_CHANNEL = 'postbox_outbox';

export interface Waker {
  /** Ask relays to look at the outbox now. Cheap to call often: concurrent calls share one NOTIFY. */
  wake(): void;
  /** Resolves when no nudge is in flight. */
  flush(): Promise<void>;
}

/**
 * A coalesced NOTIFY sent after commit, never inside the business transaction: a NOTIFY inside a transaction
 * takes a global lock held through commit and serialises every notifying commit (docs/design.md §5, docs/adr/0002). At most one NOTIFY
 * is in flight per process; calls during it fold into one follow-up. A lost nudge costs only latency: relays
 * also poll.
 */
export function createWaker(sql: Sql): Waker {
  let inFlight: Promise<void> | null = null;
  let again = false;

  const send = (): Promise<void> =>
    sql
      .notify(WAKE_CHANNEL, '')
      .then(
        () => undefined,
        () => undefined, // the poll fallback covers a failed nudge
      )
      .then(() => {
        if (again) {
          again = false;
          return send();
        }
        inFlight = null;
        return undefined;
      });

  return {
    wake() {
      if (inFlight) {
        again = true;
        return;
      }
      inFlight = send();
    },
    async flush() {
      while (inFlight) await inFlight;
    },
  };
}
