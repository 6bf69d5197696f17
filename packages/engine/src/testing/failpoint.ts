/**
 * Failpoints for fault-injection tests: `POSTBOX_FAILPOINT=<name>` makes the process kill itself with SIGKILL
 * the first time code passes `failpoint('<name>')`; `POSTBOX_FAILPOINT=<name>@<n>` on the n-th pass, so repeated
 * runs can crash at different moments of the same boundary. Read once at load; when unset (or naming another
 * failpoint), a call is one string comparison. Passes are counted per module instance: a worker thread counts
 * its own passes.
 *
 * Each name is a crash boundary of docs/design.md §12, named for where the process dies:
 * - `outbox.after-commit`: the business transaction (with its outbox rows) committed, the relays not yet nudged;
 * - `relay.after-publish-before-mark`: the broker confirmed a batch, the rows are still `publishing`;
 * - `consumer.after-commit-before-offset`: the consumer's transactions committed, the offsets not yet committed;
 * - `retry.after-ledger-before-enqueue`: a retry ledger row committed, its BullMQ job not yet enqueued;
 * - `replay.mid-batch`: a replay scheduled some failures (ledger row + audit committed, job not yet enqueued)
 *   and not the rest;
 * - `saga.participant.after-apply`: a saga participant applied a step's effect, its record and reply not yet
 *   written (the transaction dies with the process: the command is delivered again);
 * - `saga.timer.after-fire`: a saga's timer transition committed (the question or the compensation is in the
 *   outbox), the runner's next due saga not yet handled;
 * - `retention.after-detach`: a partition detached (recorded `detached`), not yet archived;
 * - `retention.after-archive-before-drop`: its archive written and verified (recorded `archived`), not dropped.
 */
export type FailpointName =
  | 'outbox.after-commit'
  | 'relay.after-publish-before-mark'
  | 'consumer.after-commit-before-offset'
  | 'retry.after-ledger-before-enqueue'
  | 'replay.mid-batch'
  | 'saga.participant.after-apply'
  | 'saga.timer.after-fire'
  | 'retention.after-detach'
  | 'retention.after-archive-before-drop';

export const FAILPOINTS: readonly FailpointName[] = [
  'outbox.after-commit',
  'relay.after-publish-before-mark',
  'consumer.after-commit-before-offset',
  'retry.after-ledger-before-enqueue',
  'replay.mid-batch',
  'saga.participant.after-apply',
  'saga.timer.after-fire',
  'retention.after-detach',
  'retention.after-archive-before-drop',
];

/** `name` or `name@n` → the name and the pass (1-based) that fires; throws on a malformed value. */
export function parseFailpoint(value: string): { name: string; pass: number } {
  const at = value.lastIndexOf('@');
  if (at < 0) return { name: value, pass: 1 };
  const pass = Number(value.slice(at + 1));
  if (!Number.isInteger(pass) || pass < 1) {
    throw new Error(
      `POSTBOX_FAILPOINT "${value}" must be <name> or <name>@<n> with n ≥ 1 (one of: ${FAILPOINTS.join(', ')})`,
    );
  }
  return { name: value.slice(0, at), pass };
}

const { name: armed, pass: firesAt } = parseFailpoint(process.env.POSTBOX_FAILPOINT ?? '');
let passes = 0;

export function failpoint(name: FailpointName): void {
  if (armed !== name) return;
  if (++passes < firesAt) return;
  process.kill(process.pid, 'SIGKILL');
}
