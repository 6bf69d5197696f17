// @postbox/engine/saga, for services that run cross-service flows: definitions, the orchestrator, participants.
export {
  defineSaga,
  INSPECT_COMMAND,
  type SagaCommand,
  type SagaDefinition,
  type SagaInput,
  type StepInput,
} from './saga/definition.ts';
export { SagaOrchestrator, SAGA_EXTENSIONS, stepKey, type ReplyVerdict, type SagaReply } from './saga/orchestrator.ts';
export { participant, type ParticipantInput, type StepOutcome } from './saga/participant.ts';
export { sagaReplyBatchHandler, sagaReplyHandler } from './saga/reply-handler.ts';
export { SagaTimerRunner, type SagaTimerOptions } from './saga/timer-runner.ts';
export { SagaDefinitionMissingError, SagaTransitionError } from './saga/errors.ts';
export { REPLY } from './saga/transition.ts';
export {
  SAGA_STATUSES,
  TERMINAL,
  type AttentionReason,
  type Direction,
  type SagaState,
  type SagaStatus,
  type StepStatus,
} from './records/saga-state.ts';
export {
  allowedActions,
  operatorTransition,
  type Refusal,
  type SagaAction,
  type SagaActionKind,
} from './saga/operator-actions.ts';
export { readSaga, sagaByBusinessKey, dueSagas } from './queries/saga-instance.ts';
export {
  listSagas,
  readSagaDetail,
  sagaCounts,
  type SagaCounts,
  type SagaFilter,
  type SagaListRow,
} from './queries/saga-list.ts';
export { sagaHistory, type SagaHistoryRow } from './queries/saga-history.ts';
export { recordIgnoredReply, type IgnoredReply } from './queries/saga-reply-ignored.ts';
