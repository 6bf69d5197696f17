import type { Tx } from '../../db/connect.ts';
import { ConfigError } from '../../errors.ts';
import { consumersOnTopic } from '../../queries/reconcile-consumer.ts';
import type { CheckContext, RepairContext, RepairOutcome } from '../check.ts';
import type { ReconcileSource, SourceVersion } from '../source.ts';

/**
 * A source of truth, page by page (its own keyset query): bounded whatever the number of aggregates. A page whose
 * last id does not move on would loop forever: that is the source's bug, said loudly.
 */
export async function* pageThrough(
  ctx: CheckContext,
  source: ReconcileSource,
): AsyncIterable<ReadonlyArray<SourceVersion>> {
  const limit = ctx.options.pageSize;
  let after: string | null = null;
  for (;;) {
    const page = await source.versions(ctx.sql, after, limit);
    if (page.length > limit)
      throw new ConfigError(
        `reconcile source ${source.aggregateType}: versions() returned ${page.length} rows for a limit of ${limit}`,
      );
    if (page.length > 0) yield page;
    if (page.length < limit) return;
    const last = page[page.length - 1]!.aggregate_id;
    if (last === after)
      throw new ConfigError(
        `reconcile source ${source.aggregateType}: versions() returned a page ending at ${last} again; it must return ids after afterId, in order`,
      );
    after = last;
  }
}

export function findSource(ctx: CheckContext, aggregateType: string): ReconcileSource | undefined {
  return ctx.sources.find((s) => s.aggregateType === aggregateType);
}

/** A repair in one transaction; the relays are nudged when it committed a repair. */
export async function transact(ctx: RepairContext, fn: (tx: Tx) => Promise<RepairOutcome>): Promise<RepairOutcome> {
  const outcome = (await ctx.sql.begin(fn)) as RepairOutcome;
  if (outcome.outcome === 'repaired') ctx.wake();
  return outcome;
}

/** The consumers that must apply a source's events: its own list, else those registered on its topic. */
export async function consumersOf(ctx: CheckContext, source: ReconcileSource): Promise<string[]> {
  return source.consumers ? [...source.consumers] : consumersOnTopic(ctx.sql, source.topic);
}
