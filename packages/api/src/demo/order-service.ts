import {
  enqueue,
  expectRows,
  newEventId,
  silentLogger,
  transaction,
  type Logger,
  type Sql,
  type Tx,
  type Waker,
} from '@postbox/engine';
import { backoffDelayMs, FailureStreak } from '@postbox/engine/runtime';

/**
 * The demo business: orders placed, paid, shipped and delivered, each change and its event committed in one
 * transaction. Versions come from the business row, guarded by a conditional UPDATE (a lost race is a
 * BusinessConflictError, never a second event for the same version). Some placed orders start a fulfilment saga
 * instead (demo/saga/): in the same transaction, and their progress is the saga's, not this random walk's.
 */
const NEXT: Record<string, { state: string; event: string } | undefined> = {
  placed: { state: 'paid', event: 'OrderPaid' },
  paid: { state: 'shipped', event: 'OrderShipped' },
  shipped: { state: 'delivered', event: 'OrderDelivered' },
};

export interface DemoOrderService {
  committed(): number;
  stop(): Promise<void>;
}

export interface OrderServiceOptions {
  topic: string;
  ratePerSecond: number;
  /** Failure streaks are logged here (once when they start, now and then while they last, once when they end). */
  log?: Logger;
  /** Sagas started for placed orders. @defaultValue none */
  sagas?: OrderSagas;
}

export interface OrderSagas {
  /** Placed orders a second that start a saga (at most ratePerSecond of the service: they are among its events). */
  ratePerSecond: number;
  /** Starts the saga in the transaction that places the order: both commit, or neither. */
  start: (tx: Tx, order: { orderId: string; amountCents: number }) => Promise<unknown>;
}

export function startOrderService(sql: Sql, waker: Waker, options: OrderServiceOptions): DemoOrderService {
  const open: Array<{ id: string; state: string; version: number }> = [];
  let committed = 0;
  let running = Promise.resolve();
  const perTick = options.ratePerSecond / 10;
  let carry = 0;
  const sagasPerTick = (options.sagas?.ratePerSecond ?? 0) / 10;
  let sagaCarry = 0;

  const placeOrder = async (withSaga: boolean) => {
    const id = `order-${newEventId().slice(-12)}`;
    const amount = 100 + Math.floor(Math.random() * 10_000);
    await transaction(sql, waker, async (tx) => {
      await tx`INSERT INTO demo_order (order_id, state, amount_cents, version) VALUES (${id}, 'placed', ${amount}, 1)`;
      await enqueue(
        tx,
        {
          event_type: 'OrderPlaced',
          aggregate_id: id,
          aggregate_version: 1,
          data: { orderId: id, amountCents: amount },
        },
        { topic: options.topic, producer: 'demo-orders' },
      );
      if (withSaga) await options.sagas!.start(tx, { orderId: id, amountCents: amount });
    });
    if (!withSaga) open.push({ id, state: 'placed', version: 1 });
  };

  const advance = async (index: number) => {
    const order = open[index]!;
    const next = NEXT[order.state]!;
    await transaction(sql, waker, async (tx) => {
      const result = await tx`
        UPDATE demo_order SET state = ${next.state}, version = version + 1, updated_at = now()
        WHERE order_id = ${order.id} AND state = ${order.state} AND version = ${order.version}`;
      expectRows(result, 1, `order ${order.id} is no longer ${order.state}`);
      await enqueue(
        tx,
        {
          event_type: next.event,
          aggregate_id: order.id,
          aggregate_version: order.version + 1,
          data: { orderId: order.id, state: next.state },
        },
        { topic: options.topic, producer: 'demo-orders' },
      );
    });
    order.state = next.state;
    order.version++;
    if (!NEXT[order.state]) open.splice(index, 1);
  };

  const tick = async () => {
    carry += perTick;
    const count = Math.floor(carry);
    carry -= count;
    // Bounded, so a saga rate above the event rate does not pile up a debt of sagas.
    sagaCarry = Math.min(sagaCarry + sagasPerTick, 10);
    for (let i = 0; i < count; i++) {
      const withSaga = sagaCarry >= 1;
      if (withSaga || open.length < 50 || Math.random() < 0.3) await placeOrder(withSaga);
      else await advance(Math.floor(Math.random() * open.length));
      if (withSaga) sagaCarry--;
      committed++;
    }
  };

  // One tick every 100 ms, one at a time: a slow database delays the demo, it does not pile up work. A failing
  // tick (the database away) backs off as the rest of Postbox does, and the streak is logged as one.
  const streak = new FailureStreak(options.log ?? silentLogger, 'demo order service');
  let timer: NodeJS.Timeout | null = null;
  let stopped = false;
  const schedule = (delayMs: number) => {
    if (stopped) return;
    timer = setTimeout(() => {
      running = tick().then(
        () => {
          streak.succeeded();
          schedule(100);
        },
        (cause: unknown) => {
          streak.failed(cause);
          schedule(Math.max(100, backoffDelayMs(streak.count)));
        },
      );
    }, delayMs);
  };
  schedule(100);

  return {
    committed: () => committed,
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      await running;
    },
  };
}
