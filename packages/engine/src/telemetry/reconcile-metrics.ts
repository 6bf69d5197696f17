import type { Queryable } from '../db/connect.ts';
import { liveFindingCounts } from '../queries/reconcile-metrics.ts';
import { CHECK_NAMES } from '../records/finding.ts';
import { POSTBOX_ATTR } from './attributes.ts';
import { DatabaseGauges, defineInstruments } from './instruments.ts';

/** Reconciliation: the findings still broken, per check. */
const instruments = defineInstruments((make) => ({
  findingsOpen: make.gauge(
    'postbox.reconcile.findings.open',
    'Reconciliation findings still broken, per check: open (a repair can act) and manual (an operator decides)',
    '{finding}',
  ),
}));

const reconcileGauges = new DatabaseGauges(
  instruments,
  (m) => [m.findingsOpen],
  (sql) => liveFindingCounts(sql),
  (rows, result, m) => {
    const counts = new Map(rows.map((r) => [`${r.check}/${r.status}`, r.count]));
    // Every check and status, 0 when none: a series that drops to nothing must read 0, not its last value.
    for (const check of CHECK_NAMES) {
      for (const status of ['open', 'manual'] as const) {
        result.observe(m.findingsOpen, counts.get(`${check}/${status}`) ?? 0, {
          [POSTBOX_ATTR.reconcileCheck]: check,
          [POSTBOX_ATTR.findingStatus]: status,
        });
      }
    }
  },
);

/**
 * The reconciliation gauge (live findings per check and status), while something that runs reconciliation lives
 * in this process (the control plane): read from the rows, whoever ran the checks (the CLI, another process).
 */
export function observeReconcileFindings(owner: object, sql: Queryable): () => void {
  return reconcileGauges.add(owner, sql);
}
