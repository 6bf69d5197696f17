import { PostboxError } from '../errors.ts';

/**
 * A saga's transition could not be computed: one of its definition's functions (command, query, compensate,
 * onSuccess) threw on the saga's data. Permanent: the same data gives the same throw, so the saga is frozen
 * (needs_attention, transition_failed) for an operator instead of being retried.
 */
export class SagaTransitionError extends PostboxError {
  readonly sagaId: string;

  constructor(sagaId: string, cause: unknown) {
    super(
      'saga_transition_failed',
      'permanent',
      `saga ${sagaId}: its definition threw while computing the transition: ${(cause as Error)?.message ?? String(cause)}`,
      { cause },
    );
    this.sagaId = sagaId;
  }
}

/**
 * A reply for a saga whose definition version this process does not load. Transient: a process that loads it
 * (the rolling deploy's other half) takes the reply through the consumer's retry path; if none does within the
 * grace period, a timer runner freezes the saga as definition_missing.
 */
export class SagaDefinitionMissingError extends PostboxError {
  constructor(sagaId: string, type: string, version: number) {
    super(
      'saga_definition_missing',
      'transient',
      `saga ${sagaId} runs ${type} v${version}, which this process does not load: left for a process that does`,
    );
  }
}
