import { republish } from '../../control/republish.ts';
import { NotFoundError } from '../../errors.ts';
import { type OutboxFact, outboxRowAt, outboxRowsAt } from '../../queries/reconcile-outbox.ts';
import type { CheckContext, ReconcileCheck, RepairContext, RepairOutcome, ScanPage } from '../check.ts';
import type { Finding, StoredFinding } from '../../records/finding.ts';
import { type ReconcileSource, versionOf } from '../source.ts';
import { findSource, pageThrough, transact } from './support.ts';

/** One page of a source of truth and the outbox rows at its (aggregate, version) pairs. */
export interface OutboxMissingFacts {
  aggregateType: string;
  canReemit: boolean;
  versions: ReadonlyArray<{ aggregateId: string; version: number }>;
  rows: readonly OutboxFact[];
}

/**
 * outbox-missing — a business row at version v has its event in the outbox, published: no row for
 * (aggregate, v) is `missing_row` (a code path changed the business row without enqueueing; repaired by the
 * source's re-emit command), a row failed for good is `failed` (republished), a row still pending or publishing
 * after the grace period is `unpublished` (no relay is carrying it: for an operator). Version 0: nothing emitted
 * yet, nothing expected.
 */
export function judgeOutboxMissing(facts: OutboxMissingFacts, now: number, graceMs: number): Finding[] {
  const rows = new Map(facts.rows.map((r) => [`${r.aggregate_id}@${r.aggregate_version}`, r]));
  const out: Finding[] = [];
  for (const { aggregateId, version } of facts.versions) {
    if (version < 1) continue;
    const key = `${facts.aggregateType}:${aggregateId}@${version}`;
    const expected = { aggregateType: facts.aggregateType, aggregateId, version, outbox: 'published' };
    const row = rows.get(`${aggregateId}@${version}`);
    if (!row) {
      out.push({ key, kind: 'missing_row', expected, observed: { outbox: null }, repairable: facts.canReemit });
    } else if (row.status === 'failed') {
      out.push({ key, kind: 'failed', expected, observed: observedRow(row, now), repairable: true });
    } else if (row.status !== 'published' && row.status !== 'archived' && now - row.created_at.getTime() > graceMs) {
      out.push({ key, kind: 'unpublished', expected, observed: observedRow(row, now), repairable: false });
    }
  }
  return out;
}

function observedRow(row: OutboxFact, now: number): Record<string, unknown> {
  return {
    outbox: row.status,
    eventId: row.event_id,
    ageMs: now - row.created_at.getTime(),
    ...(row.last_error ? { lastError: row.last_error } : {}),
  };
}

async function* scan(ctx: CheckContext): AsyncIterable<ScanPage> {
  for (const source of ctx.sources) {
    for await (const page of pageThrough(ctx, source)) {
      const versions = page.map((r) => ({ aggregateId: r.aggregate_id, version: versionOf(source, r) }));
      const rows = await outboxRowsAt(ctx.sql, versions);
      const facts = { aggregateType: source.aggregateType, canReemit: !!source.reemit, versions, rows };
      yield {
        scanned: page.length,
        findings: judgeOutboxMissing(facts, ctx.now(), ctx.options.graceMs['outbox-missing']),
      };
    }
  }
}

/**
 * A finding the run did not observe holds again unless the outbox row of its (aggregate, version) is still on
 * its way and was written inside the grace period: the scan does not call such a row unpublished yet. Published,
 * archived, or not the business version any more (the scan saw the aggregate at another one): healthy.
 */
async function healthy(ctx: CheckContext, findings: readonly StoredFinding[], settledBefore: Date): Promise<number[]> {
  const at = (f: StoredFinding) => `${f.expected.aggregateId as string}@${f.expected.version as number}`;
  const rows = await outboxRowsAt(
    ctx.sql,
    findings.map((f) => ({ aggregateId: f.expected.aggregateId as string, version: f.expected.version as number })),
  );
  const fresh = new Set(
    rows
      .filter((r) => r.status !== 'published' && r.status !== 'archived' && r.created_at > settledBefore)
      .map((r) => `${r.aggregate_id}@${r.aggregate_version}`),
  );
  return findings.filter((f) => !fresh.has(at(f))).map((f) => f.id);
}

async function repair(ctx: RepairContext, f: StoredFinding): Promise<RepairOutcome> {
  const { aggregateType, aggregateId, version } = f.expected as {
    aggregateType: string;
    aggregateId: string;
    version: number;
  };
  const source = findSource(ctx, aggregateType);
  if (f.kind === 'missing_row') return reemit(ctx, f, source, aggregateId, version);
  if (f.kind === 'failed') return republishFailed(ctx, f, aggregateId, version);
  return { outcome: 'manual', detail: `the row is ${String(f.observed.outbox)}: check that a relay runs (relay_lane)` };
}

/** The source's own command writes the event again, in one transaction with the audit record. */
async function reemit(
  ctx: RepairContext,
  f: StoredFinding,
  source: ReconcileSource | undefined,
  aggregateId: string,
  version: number,
): Promise<RepairOutcome> {
  if (!source?.reemit)
    return { outcome: 'manual', detail: `no re-emit command registered for ${f.expected.aggregateType as string}` };
  const action = `reemit ${source.aggregateType}:${aggregateId}@${version}`;
  return transact(ctx, async (tx) => {
    const row = await outboxRowAt(tx, aggregateId, version);
    if (row) return { outcome: 'stale', detail: `the outbox has version ${version} now (${row.status})` };
    if (ctx.dryRun)
      return { outcome: 'would_repair', action, detail: 'no outbox row: the registered command would emit it' };
    if (!(await source.reemit!(tx, aggregateId, version)))
      return { outcome: 'stale', detail: `the command had nothing to emit (the business row moved past ${version})` };
    const written = await outboxRowAt(tx, aggregateId, version);
    if (!written)
      throw new Error(`${action}: the command reported an event but wrote no outbox row at version ${version}`);
    const auditId = await ctx.audit(
      tx,
      'reconcile.reemit',
      f,
      { outbox: null, businessVersion: version },
      { outbox: written.status, eventId: written.event_id, topic: written.topic },
    );
    return { outcome: 'repaired', action, detail: `event ${written.event_id} enqueued`, auditId };
  });
}

/** A row that failed for good goes back to pending with its event id (the republish command, audited by it). */
async function republishFailed(
  ctx: RepairContext,
  f: StoredFinding,
  aggregateId: string,
  version: number,
): Promise<RepairOutcome> {
  const action = `republish ${aggregateId} v${version}`;
  const row = await outboxRowAt(ctx.sql, aggregateId, version);
  if (!row || row.status !== 'failed')
    return { outcome: 'stale', detail: `the row is ${row?.status ?? 'gone'} now, not failed` };
  if (ctx.dryRun) return { outcome: 'would_repair', action, detail: `failed: ${row.last_error ?? 'no error kept'}` };
  try {
    const r = await republish(ctx.sql, {
      aggregateId,
      fromVersion: version,
      toVersion: version,
      actor: ctx.actor,
      reason: `${ctx.reason} (reconcile finding ${f.id}: ${f.check} ${f.key})`,
    });
    return { outcome: 'repaired', action, detail: `requeued ${r.requeued.join(', ')}`, auditId: r.auditId };
  } catch (error) {
    if (error instanceof NotFoundError) return { outcome: 'stale', detail: 'the row is no longer failed' };
    throw error;
  }
}

export const outboxMissing: ReconcileCheck = {
  name: 'outbox-missing',
  description: 'a business row at version v has a published outbox row for (aggregate, v)',
  unavailable: (ctx) =>
    ctx.sources.length === 0 ? 'no reconcile source registered (POSTBOX_RECONCILE_MODULES)' : null,
  scan,
  healthy,
  repair,
};
