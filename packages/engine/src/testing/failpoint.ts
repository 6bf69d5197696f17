/**
 * Failpoints for fault-injection tests: `POSTBOX_FAILPOINT=<name>` makes the process kill itself with SIGKILL
 * the first time code passes `failpoint('<name>')`. Read once at load; when unset, a call is one comparison.
 */
const armed = process.env.POSTBOX_FAILPOINT ?? '';

export type FailpointName = 'consumer.after-commit-before-offset' | 'retry.after-ledger-before-enqueue';

export function failpoint(name: FailpointName): void {
  if (armed !== name) return;
  process.kill(process.pid, 'SIGKILL');
}
