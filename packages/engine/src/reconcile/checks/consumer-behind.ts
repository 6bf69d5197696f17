import { republish } from '../../control/republish.ts';
import { NotFoundError } from '../../errors.ts';
import {
  appliedVersion,
  type ConsumerLag,
  consumerPositions,
  consumersBehind,
  firstParked,
} from '../../queries/reconcile-consumer.ts';
import { type OutboxFact, outboxRowsAt } from '../../queries/reconcile-outbox.ts';
import type { CheckContext, ReconcileCheck, RepairContext, RepairOutcome, ScanPage } from '../check.ts';
import type { Finding, StoredFinding } from '../../records/finding.ts';
import { versionOf } from '../source.ts';
import { consumersOf, pageThrough } from './support.ts';

export interface ConsumerBehindFacts {
  aggregateType: string;
  /** (consumer, aggregate) pairs whose applied version is below the business version. */
  behind: readonly ConsumerLag[];
  /** The outbox rows at the business versions. */
  rows: readonly OutboxFact[];
}

/**
 * consumer-behind — every consumer of a source's topic has applied the business version v once the event of
 * (aggregate, v) was published longer ago than the grace period. What it is instead, told apart:
 * - `blocked`: the aggregate's head waits for a retry or sits in the failure store (repair: the retry ledger, or
 *   a replay — for an operator, `postbox failures blocked`);
 * - `parked_gap`: later versions are parked behind a missing one (repair: republish the missing versions);
 * - `never_delivered`: nothing of it reached the consumer (its group moved past the records; repair: republish
 *   from the first version it lacks).
 * Not yet published (or no row): outbox-missing's business, not this check's.
 */
export function judgeConsumerBehind(facts: ConsumerBehindFacts, now: number, graceMs: number): Finding[] {
  const rows = new Map(facts.rows.map((r) => [`${r.aggregate_id}@${r.aggregate_version}`, r]));
  const out: Finding[] = [];
  for (const lag of facts.behind) {
    const row = rows.get(`${lag.aggregate_id}@${lag.version}`);
    if (!row || row.status !== 'published' || !row.published_at) continue;
    if (now - row.published_at.getTime() <= graceMs) continue;
    const kind = lag.blocked_reason ? 'blocked' : lag.parked > 0 ? 'parked_gap' : 'never_delivered';
    out.push({
      key: `${lag.consumer_name}:${facts.aggregateType}:${lag.aggregate_id}@${lag.version}`,
      kind,
      expected: { consumer: lag.consumer_name, aggregateId: lag.aggregate_id, version: lag.version },
      observed: {
        applied: lag.last_version,
        publishedAgoMs: now - row.published_at.getTime(),
        ...(lag.blocked_reason
          ? { blocked: lag.blocked_reason, headVersion: lag.blocked_version, headEventId: lag.blocked_event_id }
          : {}),
        ...(lag.parked > 0 ? { parked: lag.parked, firstParked: lag.first_parked } : {}),
      },
      repairable: kind !== 'blocked',
    });
  }
  return out;
}

async function* scan(ctx: CheckContext): AsyncIterable<ScanPage> {
  for (const source of ctx.sources) {
    const consumers = await consumersOf(ctx, source);
    if (consumers.length === 0) continue;
    for await (const page of pageThrough(ctx, source)) {
      const pairs = page.map((r) => ({ aggregateId: r.aggregate_id, version: versionOf(source, r) }));
      const behind = await consumersBehind(ctx.sql, consumers, pairs);
      const lagging = new Set(behind.map((b) => b.aggregate_id));
      const rows =
        lagging.size > 0
          ? await outboxRowsAt(
              ctx.sql,
              pairs.filter((p) => lagging.has(p.aggregateId)),
            )
          : [];
      yield {
        scanned: page.length * consumers.length,
        findings: judgeConsumerBehind(
          { aggregateType: source.aggregateType, behind, rows },
          ctx.now(),
          ctx.options.graceMs['consumer-behind'],
        ),
      };
    }
  }
}

/**
 * A finding the run did not observe holds again only when its consumer has applied the finding's version. Still
 * below it, the scan may have passed it over because the aggregate moved on inside the grace period (its newer
 * event not yet published long enough): the consumer still lacks a version published long ago, so it stays.
 */
async function healthy(ctx: CheckContext, findings: readonly StoredFinding[]): Promise<number[]> {
  const pairs = findings.map((f) => ({
    consumer: f.expected.consumer as string,
    aggregateId: f.expected.aggregateId as string,
  }));
  const applied = new Map(
    (await consumerPositions(ctx.sql, pairs)).map((p) => [`${p.consumer_name}\u0000${p.aggregate_id}`, p.last_version]),
  );
  return findings
    .filter((f) => {
      const v = applied.get(`${f.expected.consumer as string}\u0000${f.expected.aggregateId as string}`) ?? 0;
      return v >= (f.expected.version as number);
    })
    .map((f) => f.id);
}

/**
 * Sends the versions the consumer lacks again from the outbox (the republish command: same event ids, every
 * consumer that has them absorbs the duplicate): from the first version it has not applied up to the business
 * version, or up to the first parked one.
 */
async function repair(ctx: RepairContext, f: StoredFinding): Promise<RepairOutcome> {
  if (f.kind === 'blocked')
    return { outcome: 'manual', detail: 'the aggregate is blocked: see postbox failures blocked (retry or replay)' };
  const { consumer, aggregateId, version } = f.expected as { consumer: string; aggregateId: string; version: number };
  return republishRange(ctx, f, consumer, aggregateId, version);
}

/** Republishes what a consumer lacks of an aggregate below `upTo`; shared with stale-failures' gap back-fill. */
export async function republishRange(
  ctx: RepairContext,
  f: StoredFinding,
  consumer: string,
  aggregateId: string,
  upTo: number,
): Promise<RepairOutcome> {
  const applied = await appliedVersion(ctx.sql, consumer, aggregateId);
  if (applied >= upTo) return { outcome: 'stale', detail: `${consumer} has applied version ${applied} now` };
  const parked = await firstParked(ctx.sql, consumer, aggregateId);
  const from = applied + 1;
  const to = parked !== null && parked <= upTo ? parked - 1 : upTo;
  if (to < from) return { outcome: 'stale', detail: `the gap closed: ${consumer} drains from version ${parked}` };
  const action = `republish ${aggregateId} v${from}${to > from ? `…${to}` : ''}`;
  if (ctx.dryRun) return { outcome: 'would_repair', action, detail: `${consumer} is at version ${applied}` };
  try {
    const r = await republish(ctx.sql, {
      aggregateId,
      fromVersion: from,
      toVersion: to,
      actor: ctx.actor,
      reason: `${ctx.reason} (reconcile finding ${f.id}: ${f.check} ${f.key})`,
    });
    ctx.wake();
    return {
      outcome: 'repaired',
      action,
      detail: `requeued ${r.requeued.join(', ')} for ${consumer}`,
      auditId: r.auditId,
    };
  } catch (error) {
    if (error instanceof NotFoundError)
      return {
        outcome: 'manual',
        detail: `no published outbox row of ${aggregateId} v${from}…${to} to send again (in flight, or missing)`,
      };
    throw error;
  }
}

export const consumerBehind: ReconcileCheck = {
  name: 'consumer-behind',
  description:
    'every consumer has applied the business version once its event was published (parked gap, blocked, never delivered)',
  unavailable: (ctx) =>
    ctx.sources.length === 0 ? 'no reconcile source registered (POSTBOX_RECONCILE_MODULES)' : null,
  scan,
  healthy,
  repair,
};
