import type { Sql } from '../db/connect.ts';
import type { Publisher } from '../ports/publisher.ts';
import { runLaneCycle, type CycleResult, type LaneTask } from './cycle.ts';
import type { RelayOptions } from './options.ts';

/** Runs lane cycles somewhere: on this thread, or in a worker pool (@postbox/workers). */
export interface LaneExecutor {
  run(task: LaneTask): Promise<CycleResult>;
  /** Idempotent; waits for running cycles. */
  close(): Promise<void>;
}

/** Cycles on the calling thread, sharing one producer: the baseline the worker pool is measured against. */
export function inlineExecutor(deps: { sql: Sql; publisher: Publisher; options: RelayOptions }): LaneExecutor {
  let closed = false;
  return {
    run: (task) => runLaneCycle(deps, task),
    async close() {
      if (closed) return;
      closed = true;
      await deps.publisher.close();
    },
  };
}
