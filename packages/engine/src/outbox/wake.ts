import type { Sql } from '../db/connect.ts';

/**
 * The channel relays LISTEN on. The payload names the lanes that have news ("3,11"); an empty payload means
 * every lane. A nudge says "look there", never "what".
 */
export const WAKE_CHANNEL = 'postbox_outbox';

export interface Waker {
  /**
   * Ask relays to look at the outbox now: at these lanes (the lanes the committed rows fell in), or at every lane
   * when none are named. Cheap to call often: calls during a NOTIFY in flight fold into one follow-up.
   */
  wake(lanes?: readonly number[]): void;
  /** Resolves when no nudge is in flight. */
  flush(): Promise<void>;
}

/**
 * A coalesced NOTIFY sent after commit, never inside the business transaction: a NOTIFY inside a transaction
 * takes a global lock held through commit and serialises every notifying commit (docs/design.md §5, docs/adr/0002). At most one NOTIFY
 * is in flight per process; calls during it fold into one follow-up naming the union of their lanes. Naming the
 * lanes matters under load: a relay woken for every lane runs a claim in each of its lanes per nudge, most of
 * them empty (16 claims for one row). A lost nudge costs only latency: relays also poll.
 */
export function createWaker(sql: Sql): Waker {
  let inFlight: Promise<void> | null = null;
  /** Lanes of the follow-up; null: no follow-up yet; 'all': some call named no lanes. */
  let pending: Set<number> | 'all' | null = null;

  const send = (lanes: Set<number> | 'all'): Promise<void> =>
    sql
      .notify(WAKE_CHANNEL, wakePayload(lanes))
      .then(
        () => undefined,
        () => undefined, // the poll fallback covers a failed nudge
      )
      .then(() => {
        const next = pending;
        pending = null;
        if (next) return send(next);
        inFlight = null;
        return undefined;
      });

  return {
    wake(lanes = []) {
      const asked: Set<number> | 'all' = lanes.length === 0 ? 'all' : new Set(lanes);
      if (!inFlight) {
        inFlight = send(asked);
        return;
      }
      if (pending === 'all' || asked === 'all') pending = 'all';
      else if (pending === null) pending = asked;
      else for (const lane of asked) pending.add(lane);
    },
    async flush() {
      while (inFlight) await inFlight;
    },
  };
}

export function wakePayload(lanes: Set<number> | 'all'): string {
  return lanes === 'all' ? '' : [...lanes].sort((a, b) => a - b).join(',');
}

/** The lanes a NOTIFY payload names; null: every lane (empty, or not a list of lane numbers). */
export function parseWakePayload(payload: string): number[] | null {
  const parts = payload.split(',');
  if (!parts.every((p) => /^\d{1,5}$/.test(p))) return null;
  return parts.map((p) => Number(p));
}
