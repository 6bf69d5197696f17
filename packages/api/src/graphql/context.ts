import type { PayloadKeyRing, Sql } from '@postbox/engine';
import type { BacklogMonitor, BrokerHealthMonitor, Probe } from '@postbox/engine/control';
import type { Reconciler } from '@postbox/engine/reconcile';
import type { RetryScheduler } from '@postbox/engine/runtime';
import type { SagaOrchestrator } from '@postbox/engine/saga';
import type { Caller } from './auth.ts';

/** What resolvers may use: engine functions over these, nothing else. */
export interface ApiDeps {
  sql: Sql;
  backlog: BacklogMonitor;
  /** The broker's replica health of Postbox's topics, sampled here; `supported` is false for NATS and RabbitMQ. */
  brokerHealth: BrokerHealthMonitor;
  /** The retry scheduler of a consumer (one queue each); null without Redis. */
  schedulerFor: (consumer: string) => RetryScheduler | null;
  probes: Record<string, Probe>;
  /**
   * The saga definitions operator actions are built from (POSTBOX_SAGA_MODULES, or the orchestrator of the
   * process hosting the control plane). Without it sagas are read, never acted on.
   */
  sagas?: SagaOrchestrator;
  /**
   * Reconciliation over the sources of truth the control plane registers (POSTBOX_RECONCILE_MODULES, or those of
   * the process hosting it). Without sources the outbox and consumer checks are skipped, the others run.
   */
  reconciler: Reconciler;
  /** Opens sealed failures for the payload scope, seals the ledger rows a replay or skip writes. */
  payloadKeys: PayloadKeyRing | null;
}

export interface ApiContext {
  caller: Caller;
  deps: ApiDeps;
  production: boolean;
  /** Audit writes started during the request (denials); awaited before the response is sent. */
  audits: Promise<unknown>[];
  /**
   * Payload-scoped fields this request was refused, by schema coordinate (`Failure.payload`), with the rows they
   * were asked of: one audit row per field and request, written before the response is sent.
   */
  deniedReads: Map<string, Array<string | null>>;
}
