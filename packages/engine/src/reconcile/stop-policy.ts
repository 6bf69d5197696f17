import { ConfigError } from '../errors.ts';

/** When a batch repair stops by itself. */
export interface StopPolicy {
  /** The first N items are the canary: one failure among them stops the batch. @defaultValue 5 */
  canary: number;
  /** Past the canary, the batch stops once failed / done exceeds this. @defaultValue 0.2 */
  maxErrorRatio: number;
  /** The ratio is judged only after this many items. @defaultValue 5 */
  minSample: number;
}

export interface RepairTally {
  done: number;
  failed: number;
}

export type StopReason = 'canary_failed' | 'error_ratio';

/** Whether to stop after the item just done. Pure. */
export function shouldStop(t: RepairTally, p: StopPolicy): StopReason | null {
  if (t.done <= p.canary) return t.failed > 0 ? 'canary_failed' : null;
  if (t.done >= p.minSample && t.failed / t.done > p.maxErrorRatio) return 'error_ratio';
  return null;
}

export function resolveStopPolicy(p: Partial<StopPolicy> = {}): StopPolicy {
  const policy = { canary: p.canary ?? 5, maxErrorRatio: p.maxErrorRatio ?? 0.2, minSample: p.minSample ?? 5 };
  if (!Number.isInteger(policy.canary) || policy.canary < 0)
    throw new ConfigError(`repair canary must be an integer ≥ 0, got ${policy.canary}`);
  if (!(policy.maxErrorRatio >= 0 && policy.maxErrorRatio <= 1))
    throw new ConfigError(`repair maxErrorRatio must be from 0 to 1, got ${policy.maxErrorRatio}`);
  if (!Number.isInteger(policy.minSample) || policy.minSample < 1)
    throw new ConfigError(`repair minSample must be an integer ≥ 1, got ${policy.minSample}`);
  return policy;
}
