import type { Logger, Sql, Tx } from '@postbox/engine';
import type { Consumer } from '@postbox/engine/runtime';
import { type SagaDefinition, SagaOrchestrator, SagaTimerRunner } from '@postbox/engine/saga';
import { type ConsumerRuntimeOptions, startConsumer } from '@postbox/workers';
import { type RoleSet, startedTogether } from '../../cli/role-set.ts';
import { fulfilmentConsumers } from './consumers.ts';
import { type FulfilmentData, fulfilmentSaga } from './fulfilment-saga.ts';
import type { FulfilmentSettings } from './settings.ts';

export interface FulfilmentDemo {
  definition: SagaDefinition<FulfilmentData>;
  /** Runs the demo's sagas; the control plane acts on them with it (operator mutations). */
  orchestrator: SagaOrchestrator;
  consumers: Consumer[];
  /** Starts an order's saga in the transaction that places it (the order id is its business key). */
  start(tx: Tx, order: FulfilmentData): Promise<unknown>;
}

/**
 * The demo saga's roles in a command: the three participant consumers and the reply consumer (side by side), then
 * the timer runner on `sql`. The RoleSet stops them in reverse — the timer runner first, the consumers after it — and all
 * before the pool they were given. The consumers run inline: a few events a second do not pay for four more
 * worker pools on a small machine.
 */
export async function startFulfilmentRoles(
  roles: RoleSet,
  sql: Sql,
  settings: FulfilmentSettings,
  runtime: ConsumerRuntimeOptions,
  log: Logger,
): Promise<FulfilmentDemo> {
  const definition = fulfilmentSaga(settings.prefix);
  // Starts sagas and fires their timers; the reply consumer runs its own, built from the same definition.
  const orchestrator = new SagaOrchestrator([definition]);
  // Refuses to run a definition that changed shape without a new version, or one unfinished sagas do not match.
  await roles.start(
    'saga definitions',
    () => orchestrator.register(sql),
    async () => {},
  );
  // Side by side: each joins its group, which after a crash waits out the dead member's session.
  const consumers: Consumer[] = await startedTogether(
    fulfilmentConsumers(settings).map((consumer) =>
      roles.start(
        `consumer ${consumer.name}`,
        () => startConsumer(consumer, { ...runtime, inline: true }),
        (c: Consumer) => c.stop(),
      ),
    ),
  );
  await roles.start(
    'saga timer runner',
    async () => {
      const timers = new SagaTimerRunner(sql, orchestrator, { log });
      timers.start();
      return timers;
    },
    (timers) => timers.stop(),
  );
  return {
    definition,
    orchestrator,
    consumers,
    start: (tx, order) => orchestrator.start(tx, definition, { businessKey: order.orderId, data: order }),
  };
}
