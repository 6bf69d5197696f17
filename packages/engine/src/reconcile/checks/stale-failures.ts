import {
  type AgedFailure,
  type AgedGap,
  failureIsOpen,
  openFailureIds,
  openFailuresBefore,
  parkedGapsBefore,
} from '../../queries/reconcile-failures.ts';
import type { CheckContext, ReconcileCheck, RepairContext, RepairOutcome, ScanPage } from '../check.ts';
import type { Finding, StoredFinding } from '../../records/finding.ts';
import { consumerPositions } from '../../queries/reconcile-consumer.ts';
import { republishRange } from './consumer-behind.ts';

/**
 * stale-failures — the failure store and parked gaps are recovery queues, not bins: an open failure older than
 * the SLA (`open_failure`: fix the cause, then replay — for an operator), and a version gap parked longer than the
 * SLA (`parked_gap`: back-filled by republishing the missing versions, unless the aggregate is blocked, whose gap
 * is a failure to replay) are reported, whatever the aggregate type.
 */
export function judgeStaleFailures(failures: readonly AgedFailure[], gaps: readonly AgedGap[], now: number): Finding[] {
  return [
    ...failures.map((f) => ({
      key: `failure:${f.failure_id}`,
      kind: 'open_failure',
      expected: { failureId: f.failure_id, consumer: f.consumer_name, status: 'replayed or skipped' },
      observed: {
        status: 'open',
        errorCode: f.error_code,
        eventId: f.event_id,
        aggregate: f.aggregate_id === null ? null : `${f.aggregate_id}@${f.aggregate_version}`,
        ageMs: now - f.first_failed_at.getTime(),
      },
      repairable: false,
    })),
    ...gaps.map((g) => ({
      key: `gap:${g.consumer_name}/${g.aggregate_id}@${g.expected_version}`,
      kind: 'parked_gap',
      expected: { consumer: g.consumer_name, aggregateId: g.aggregate_id, version: g.expected_version },
      observed: {
        firstParked: g.first_parked,
        parked: g.parked,
        blocked: g.blocked,
        ageMs: now - g.oldest_parked_at.getTime(),
      },
      repairable: !g.blocked,
    })),
  ];
}

async function* scan(ctx: CheckContext): AsyncIterable<ScanPage> {
  const now = ctx.now();
  const cutoff = new Date(now - ctx.options.graceMs['stale-failures']);
  const limit = ctx.options.pageSize;
  for (let after = 0; ; ) {
    const failures = await openFailuresBefore(ctx.sql, cutoff, after, limit);
    if (failures.length > 0) yield { scanned: failures.length, findings: judgeStaleFailures(failures, [], now) };
    if (failures.length < limit) break;
    after = failures[failures.length - 1]!.failure_id;
  }
  for (let after: { consumer: string; aggregateId: string } | null = null; ; ) {
    const gaps = await parkedGapsBefore(ctx.sql, cutoff, after, limit);
    if (gaps.length > 0) yield { scanned: gaps.length, findings: judgeStaleFailures([], gaps, now) };
    if (gaps.length < limit) return;
    const last = gaps[gaps.length - 1]!;
    after = { consumer: last.consumer_name, aggregateId: last.aggregate_id };
  }
}

/**
 * A finding the run did not observe holds again when its failure is no longer open, or when its gap closed: the
 * consumer applied the version it waited for, or nothing of the aggregate is parked any more. (An open failure
 * only ages, so the scan sees it on every run; a gap left open is seen too, whatever was parked behind it since.)
 */
async function healthy(ctx: CheckContext, findings: readonly StoredFinding[]): Promise<number[]> {
  const failures = findings.filter((f) => f.kind === 'open_failure');
  const gaps = findings.filter((f) => f.kind !== 'open_failure');
  const open = new Set(
    await openFailureIds(
      ctx.sql,
      failures.map((f) => f.expected.failureId as number),
    ),
  );
  const positions = new Map(
    (
      await consumerPositions(
        ctx.sql,
        gaps.map((f) => ({ consumer: f.expected.consumer as string, aggregateId: f.expected.aggregateId as string })),
      )
    ).map((p) => [`${p.consumer_name}\u0000${p.aggregate_id}`, p]),
  );
  const gapClosed = (f: StoredFinding) => {
    const p = positions.get(`${f.expected.consumer as string}\u0000${f.expected.aggregateId as string}`);
    return !p || p.parked === 0 || p.last_version >= (f.expected.version as number);
  };
  return [...failures.filter((f) => !open.has(f.expected.failureId as number)), ...gaps.filter(gapClosed)].map(
    (f) => f.id,
  );
}

async function repair(ctx: RepairContext, f: StoredFinding): Promise<RepairOutcome> {
  if (f.kind === 'open_failure') {
    const id = f.expected.failureId as number;
    if (!(await failureIsOpen(ctx.sql, id))) return { outcome: 'stale', detail: `failure ${id} is no longer open` };
    return {
      outcome: 'manual',
      detail: `fix the cause, then: postbox failures show ${id}; postbox failures replay --id ${id}`,
    };
  }
  const { consumer, aggregateId } = f.expected as { consumer: string; aggregateId: string };
  const firstParked = f.observed.firstParked as number;
  return republishRange(ctx, f, consumer, aggregateId, firstParked - 1);
}

export const staleFailures: ReconcileCheck = {
  name: 'stale-failures',
  description: 'no open failure and no parked version gap is older than the SLA',
  unavailable: () => null,
  scan,
  healthy,
  repair,
};
