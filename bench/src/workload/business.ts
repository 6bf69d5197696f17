import { enqueue, newEventId, transaction, type Sql, type Waker } from '@postbox/engine';
import { sleep } from '../support.ts';
import { benchData } from './fill.ts';

/**
 * The business transaction every producer figure is measured with: a new order (the business row, demo_order)
 * and its OrderPlaced event (the outbox row), committed together.
 */
export interface OrderWriter {
  /** Places order `<prefix>-<n>`; resolves after COMMIT. */
  place(n: number): Promise<void>;
}

/** The raw transaction: the same two rows by hand (no validation, no wake-up): what the machine can do. */
export function rawOrderWriter(sql: Sql, o: { topic: string; payload: number; prefix: string }): OrderWriter {
  const payload = benchData(o.payload);
  return {
    async place(n) {
      const id = `${o.prefix}-${n}`;
      await sql.begin(async (tx) => {
        await tx`INSERT INTO demo_order (order_id, state, amount_cents, version) VALUES (${id}, 'placed', ${100 + (n % 10_000)}, 1)`;
        await tx`
          INSERT INTO message_outbox (event_id, event_type, schema_version, aggregate_id, aggregate_version, topic, payload, producer, occurred_at)
          VALUES (${newEventId()}, 'OrderPlaced', 1, ${id}, 1, ${o.topic}, ${payload}, 'bench', now())`;
      });
    },
  };
}

/** Through the engine: transaction() + enqueue() (validated envelope, serialized once), a wake-up after commit. */
export function engineOrderWriter(
  sql: Sql,
  waker: Waker,
  o: {
    topic: string;
    payload: number;
    prefix: string;
    /** Called with the order id and the wall clock (ms) when its COMMIT returned. */
    onCommitted?: (id: string, atMs: number) => void;
  },
): OrderWriter {
  const data = { pad: 'x'.repeat(Math.max(0, o.payload - 10)) };
  return {
    async place(n) {
      const id = `${o.prefix}-${n}`;
      await transaction(sql, waker, async (tx) => {
        await tx`INSERT INTO demo_order (order_id, state, amount_cents, version) VALUES (${id}, 'placed', ${100 + (n % 10_000)}, 1)`;
        await enqueue(
          tx,
          { event_type: 'OrderPlaced', aggregate_id: id, aggregate_version: 1, data },
          { topic: o.topic, producer: 'bench' },
        );
      });
      o.onCommitted?.(id, Date.now());
    },
  };
}

/** Closed loop: `concurrency` writers place `total` orders as fast as they commit. */
export async function placeOrders(
  writer: OrderWriter,
  total: number,
  concurrency: number,
  progress?: (done: number) => void,
): Promise<void> {
  let next = 0;
  let done = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < total) {
        await writer.place(next++);
        progress?.(++done);
      }
    }),
  );
}

export interface OpenLoopResult {
  offered: number;
  completed: number;
  /** Arrivals not started because `maxInFlight` transactions were still open (the producer could not keep up). */
  shed: number;
  seconds: number;
}

/**
 * Open loop: arrivals at a fixed rate for `ms`, each its own transaction, whatever the previous ones are doing
 * (a closed loop would slow down with the system and hide its queueing). Bounded by `maxInFlight`.
 */
export async function openLoop(
  writer: OrderWriter,
  ratePerSecond: number,
  ms: number,
  maxInFlight: number,
  firstIndex: number,
): Promise<OpenLoopResult> {
  const inFlight = new Set<Promise<void>>();
  const errors: unknown[] = [];
  let offered = 0;
  let completed = 0;
  let shed = 0;
  const started = performance.now();
  for (;;) {
    const elapsed = performance.now() - started;
    if (elapsed >= ms) break;
    const due = Math.floor((elapsed / 1000) * ratePerSecond);
    while (offered < due) {
      offered++;
      if (inFlight.size >= maxInFlight) {
        shed++;
        continue;
      }
      const p: Promise<void> = writer.place(firstIndex + offered).then(
        () => {
          completed++;
          inFlight.delete(p);
        },
        (cause: unknown) => {
          errors.push(cause);
          inFlight.delete(p);
        },
      );
      inFlight.add(p);
    }
    await sleep(1);
  }
  await Promise.all(inFlight);
  if (errors.length > 0)
    throw new Error(`bench: ${errors.length} producer transaction(s) failed`, { cause: errors[0] });
  return { offered, completed, shed, seconds: (performance.now() - started) / 1000 };
}
