import { storageReport, type StorageTable } from '@postbox/engine/retention';
import { builder } from '../builder.ts';

const ArchivedRef = builder.objectRef<StorageTable['archived']>('ArchivedStorage').implement({
  description: 'What retention has archived and dropped of a table (the retention ledger)',
  fields: (t) => ({
    partitions: t.exposeInt('partitions'),
    rows: t.float({ resolve: (a) => a.rows }),
    bytes: t.float({ description: 'Compressed archive bytes', resolve: (a) => a.bytes }),
  }),
});

const StorageTableRef = builder.objectRef<StorageTable>('StorageTable').implement({
  description: 'A table partitioned by time (the outbox, the inbox): its size now and what retention archived',
  fields: (t) => ({
    table: t.exposeString('table'),
    partitions: t.exposeInt('partitions'),
    rows: t.float({ description: "The planner's estimate, summed over the partitions", resolve: (s) => s.rows }),
    bytes: t.float({ description: 'Heap, indexes and TOAST of every partition', resolve: (s) => s.bytes }),
    oldest: t.field({
      type: 'DateTime',
      nullable: true,
      description: 'The time of the oldest event id in the table',
      resolve: (s) => s.oldest,
    }),
    partitionsAhead: t.exposeInt('partitionsAhead', {
      description: 'Partitions made for periods still to come (below 2: no process is making them)',
    }),
    defaultRows: t.float({
      description: 'Rows outside every range, in the default partition (should stay 0)',
      resolve: (s) => s.defaultRows,
    }),
    archived: t.field({ type: ArchivedRef, resolve: (s) => s.archived }),
  }),
});

builder.queryField('storage', (t) =>
  t.field({
    type: [StorageTableRef],
    description: 'How big the outbox and the inbox are, partition by partition, and what retention has archived',
    authScopes: { viewer: true },
    resolve: (_root, _args, ctx) => storageReport(ctx.deps.sql),
  }),
);
