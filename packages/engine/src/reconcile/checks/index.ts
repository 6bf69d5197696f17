import type { ReconcileCheck } from '../check.ts';
import { consumerBehind } from './consumer-behind.ts';
import { outboxMissing } from './outbox-missing.ts';
import { retryJobMissing } from './retry-job-missing.ts';
import { sagaOverdue } from './saga-overdue.ts';
import { sagaStepMismatch } from './saga-step-mismatch.ts';
import { sagaTimerUnfired } from './saga-timer-unfired.ts';
import { staleFailures } from './stale-failures.ts';

/** Every check, in the order a full reconciliation runs them: the pipeline first, then sagas and SLAs. */
export const CHECKS: readonly ReconcileCheck[] = [
  outboxMissing,
  consumerBehind,
  retryJobMissing,
  sagaTimerUnfired,
  sagaOverdue,
  sagaStepMismatch,
  staleFailures,
];
