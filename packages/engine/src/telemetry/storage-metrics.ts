import { ValueType } from '@opentelemetry/api';
import type { Sql } from '../db/connect.ts';
import { lastFinishedRun } from '../queries/retention-ledger.ts';
import { POSTBOX_ATTR } from './attributes.ts';
import { DatabaseGauges, defineInstruments } from './instruments.ts';
import { storageReport } from './storage-report.ts';

/** Storage: the partitioned tables' size and partitions, and when retention last finished. */
const instruments = defineInstruments((make) => ({
  storageBytes: make.gauge(
    'postbox.storage.bytes',
    'Bytes of a partitioned table (every partition: heap, indexes, TOAST)',
    'By',
  ),
  storageRows: make.gauge('postbox.storage.rows', "Rows of a partitioned table (the planner's estimate)", '{row}'),
  partitionsAhead: make.gauge(
    'postbox.storage.partitions_ahead',
    'Partitions made for periods still to come (below 2: no process is making them)',
    '{partition}',
  ),
  defaultRows: make.gauge(
    'postbox.storage.default_rows',
    'Rows in the default partition: ids outside every range (should stay 0)',
    '{row}',
  ),
  retentionAge: make.gauge(
    'postbox.retention.last_success_age',
    'Time since a retention run last finished (-1: never)',
    's',
    ValueType.DOUBLE,
  ),
}));

const storageGauges = new DatabaseGauges(
  instruments,
  (m) => [m.storageBytes, m.storageRows, m.partitionsAhead, m.defaultRows, m.retentionAge],
  async (sql) => ({ tables: await storageReport(sql as Sql), lastRun: await lastFinishedRun(sql) }),
  ({ tables, lastRun }, result, m) => {
    for (const t of tables) {
      const table = { [POSTBOX_ATTR.table]: t.table };
      result.observe(m.storageBytes, t.bytes, table);
      result.observe(m.storageRows, t.rows, table);
      result.observe(m.partitionsAhead, t.partitionsAhead, table);
      result.observe(m.defaultRows, t.defaultRows, table);
    }
    result.observe(m.retentionAge, lastRun === null ? -1 : (Date.now() - lastRun.getTime()) / 1000);
  },
);

/**
 * The storage gauges (size, partitions ahead, rows in the default partition, time since retention last ran),
 * while partition maintenance runs in this process (every relay, consumer and `postbox start`).
 */
export function observeStorage(owner: object, sql: Sql): () => void {
  return storageGauges.add(owner, sql);
}
