import type { PayloadKeyRing } from '../crypto/payload-keys.ts';
import type { Sql } from '../db/connect.ts';
import type { Waker } from '../outbox/wake.ts';
import type { Envelope } from '../envelope/envelope.ts';
import type { ProcessSpans } from '../telemetry/process-spans.ts';
import type { ConsumerDefinition } from './definition.ts';
import type { BatchHandler, Handler } from '../records/handler.ts';
import type { WireRecord } from '../records/wire.ts';

/** What the consume step needs: a pool, the handler, and the parts of the definition it reads. */
export interface ConsumeStepDeps {
  sql: Sql;
  handler: Handler;
  /** The module's handleBatch: a task's events applied in one call. @defaultValue none: the handler per event */
  batchHandler?: BatchHandler | null;
  definition: Pick<ConsumerDefinition, 'name' | 'firstVersion' | 'schemaVersions' | 'tenants' | 'limits' | 'retry'> &
    Partial<Pick<ConsumerDefinition, 'groupId'>>;
  /**
   * Nudges relays after a commit in which a handler wrote outbox rows (a saga's next command, a follow-up
   * event), as `transaction()` does for a service. @defaultValue none: those rows wait for the relays' poll
   */
  waker?: Waker | null;
  /** Seals what the failure store and the retry ledger keep of an event. @defaultValue null: stored in clear */
  payloadKeys?: PayloadKeyRing | null;
}

/** The step's own view of one task: the handler runs inside each event's process span. */
export interface StepDeps extends ConsumeStepDeps {
  spans: ProcessSpans;
  /** Retries are durable (ledger + scheduler) for this task. */
  durable?: boolean;
}

/** A record that parsed into a valid envelope, with its index in the task. */
export interface ValidEvent {
  index: number;
  record: WireRecord;
  envelope: Envelope;
}
