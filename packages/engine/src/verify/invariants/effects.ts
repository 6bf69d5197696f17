import type { EffectFacts } from '../../records/observation.ts';
import type { ConsumerReport, EventState } from '../report.ts';
import { add, breached, tally, type Tally, type Violation } from '../violations.ts';

/**
 * A consumer's side effects: the engine's own tables cannot show a handler that did its work twice or in the
 * wrong order, only the handler's record of what it did (the effect source, effect-source.ts) can.
 * - applied-twice: no event's effect recorded more than once (log), no projection that counted more applied
 *   events than its version (counts); not checked without an effect source;
 * - out-of-order: an aggregate's versions applied in increasing order (log), no projection with fewer applied
 *   events than its version (counts); and, from the engine's state alone, with or without a source, no version
 *   applied while a lower one is neither applied, ignored nor resolved (a skip).
 */
export function checkEffects(
  effects: EffectFacts | null,
  aggregates: Map<string, Array<{ version: number; state: EventState }>>,
): { appliedTwice: Tally | null; outOfOrder: Tally } {
  const appliedTwice = effects ? tally() : null;
  const outOfOrder = new Map<string, string>();
  if (effects?.kind === 'log') {
    const count = new Map<string, number>();
    for (const e of effects.rows) count.set(e.eventId, (count.get(e.eventId) ?? 0) + 1);
    for (const [id, n] of count) if (n > 1) add(appliedTwice!, id);
    const seen = new Set<string>();
    const last = new Map<string, number>();
    for (const e of effects.rows) {
      if (seen.has(e.eventId)) continue;
      seen.add(e.eventId);
      const prev = last.get(e.aggregateId);
      if (prev !== undefined && e.version <= prev)
        outOfOrder.set(e.aggregateId, `${e.aggregateId} (version ${e.version} applied after ${prev})`);
      last.set(e.aggregateId, e.version);
    }
  } else if (effects?.kind === 'counts') {
    for (const r of effects.rows) {
      const what = `${r.aggregateId} (${r.count} effects for version ${r.version})`;
      if (r.count > r.version) add(appliedTwice!, what);
      else if (r.count < r.version) outOfOrder.set(r.aggregateId, what);
    }
  }
  for (const [aggregate, list] of aggregates) {
    if (outOfOrder.has(aggregate)) continue;
    const top = list.reduce((m, e) => (e.state === 'applied' && e.version > m ? e.version : m), 0);
    const skipped = list.find(
      (e) => e.version < top && e.state !== 'applied' && e.state !== 'ignored' && e.state !== 'resolved',
    );
    if (skipped)
      outOfOrder.set(aggregate, `${aggregate} (version ${top} applied while ${skipped.version} is ${skipped.state})`);
  }
  const out = tally();
  for (const what of outOfOrder.values()) add(out, what);
  return { appliedTwice, outOfOrder: out };
}

export function effectViolations(r: ConsumerReport): Violation[] {
  return [
    ...breached('applied-twice', r.consumer, r.appliedTwice, 'side effects applied more than once'),
    ...breached('out-of-order', r.consumer, r.outOfOrder, 'aggregates applied out of order'),
  ];
}
