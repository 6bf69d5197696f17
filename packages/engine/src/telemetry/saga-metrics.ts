import { ValueType } from '@opentelemetry/api';
import type { Queryable } from '../db/connect.ts';
import { SAGA_GAUGE_REFRESH_MS, sagaGaugeFacts } from '../queries/saga-metrics.ts';
import { SAGA_STATUSES } from '../records/saga-state.ts';
import { POSTBOX_ATTR } from './attributes.ts';
import { DatabaseGauges, defineInstruments } from './instruments.ts';

/** The sagas: how many in each status, the oldest still moving, how long the recent ones took to end. */
const instruments = defineInstruments((make) => ({
  sagas: make.gauge(
    'postbox.saga.instances',
    'Sagas by status (running, resolving, compensating, completed, compensated, needs_attention, closed_manually): started = the sum, ended by outcome = the ended statuses',
    '{saga}',
  ),
  sagaOldestRunning: make.gauge(
    'postbox.saga.oldest_running_age',
    'Age of the oldest saga still running, resolving or compensating',
    's',
    ValueType.DOUBLE,
  ),
  sagaTimeToEnd: make.gauge(
    'postbox.saga.time_to_end',
    'Start-to-end time of the sagas ended in the last five minutes, p50 and p99 (postbox.quantile), by how they ended',
    's',
    ValueType.DOUBLE,
  ),
}));

const sagaGauges = new DatabaseGauges(
  instruments,
  (m) => [m.sagas, m.sagaOldestRunning, m.sagaTimeToEnd],
  (sql) => sagaGaugeFacts(sql),
  (facts, result, m) => {
    const counts = new Map(facts.byStatus.map((r) => [r.status, r.count]));
    for (const status of SAGA_STATUSES) {
      result.observe(m.sagas, counts.get(status) ?? 0, { [POSTBOX_ATTR.sagaStatus]: status });
    }
    result.observe(m.sagaOldestRunning, facts.oldestRunningS ?? 0);
    for (const e of facts.timeToEnd) {
      result.observe(m.sagaTimeToEnd, e.p50, { [POSTBOX_ATTR.sagaStatus]: e.status, [POSTBOX_ATTR.quantile]: 'p50' });
      result.observe(m.sagaTimeToEnd, e.p99, { [POSTBOX_ATTR.sagaStatus]: e.status, [POSTBOX_ATTR.quantile]: 'p99' });
    }
  },
  // Counting the sagas by status reads the whole table: at most once a minute per process, not at every scrape.
  SAGA_GAUGE_REFRESH_MS,
);

/**
 * The saga gauges (instances by status, the oldest running, recent time to end), while a saga timer runner runs
 * in this process: read from the rows, since sagas move in consumer worker threads whose meters no endpoint sees.
 */
export function observeSagas(owner: object, sql: Queryable): () => void {
  return sagaGauges.add(owner, sql);
}
