import type { ReconcileCheck } from '../check.ts';
import { outboxMissing } from './outbox-missing.ts';

/** Every check, in the order a full reconciliation runs them: the pipeline first, then sagas and SLAs. */
export const CHECKS: readonly ReconcileCheck[] = [outboxMissing];
