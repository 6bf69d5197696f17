import type { SagaFacts } from '../../records/observation.ts';
import type { CheckOptions } from '../options.ts';
import type { SagaReport } from '../report.ts';
import { add, breached, type Checked, tally, unsettled } from '../violations.ts';

const LIVE = new Set(['running', 'resolving', 'compensating']);

/**
 * The sagas' invariants, from their rows alone (no definition needed):
 * - saga-stuck: every saga is ended, frozen for an operator (needs_attention), or waiting on a live timer — a
 *   saga whose command is out has a due time not older than the stuck threshold (else its timers are not firing);
 *   a final check wants every saga ended or frozen;
 * - saga-history: one transition per version (versions 1…n each written once: two replies at once cannot both
 *   move a saga), and the commands written for each step are the ones the saga counted;
 * - saga-command-twice: no step's forward command sent twice (an unanswered one is asked about, never re-sent);
 * - saga-compensation-order: compensations go to steps that were sent forward, last first;
 * - saga-command-after-attention: nothing sent while a saga was frozen (from its needs_attention line until the
 *   operator's next one).
 */
export function checkSagas(facts: SagaFacts, o: { at: number }, opts: CheckOptions): Checked<SagaReport> {
  const history = group(facts.history, (h) => h.sagaId);
  const commands = group(facts.commands, (c) => c.sagaId);
  const r: SagaReport = {
    sagas: facts.instances.length,
    byStatus: {},
    stuck: tally(),
    unsettled: tally(),
    historyBroken: tally(),
    commandsTwice: tally(),
    compensationOrder: tally(),
    afterAttention: tally(),
  };
  for (const s of facts.instances) {
    r.byStatus[s.status] = (r.byStatus[s.status] ?? 0) + 1;
    const lines = history.get(s.sagaId) ?? [];
    const sent = commands.get(s.sagaId) ?? [];
    if (LIVE.has(s.status)) {
      if (s.dueAt === null) add(r.stuck, `${s.sagaId} (${s.status} with no timer)`);
      else if (o.at - s.dueAt > opts.stuckAfterMs) {
        add(r.stuck, `${s.sagaId} (${s.status}, timer due ${Math.round((o.at - s.dueAt) / 1000)} s ago)`);
      }
      add(r.unsettled, `${s.sagaId} (${s.status})`);
    }
    const broken = historyProblem(s, lines, sent);
    if (broken) add(r.historyBroken, `${s.sagaId} (${broken})`);
    const twice = forwardTwice(sent);
    if (twice) add(r.commandsTwice, `${s.sagaId} (step ${twice} sent forward more than once)`);
    const order = compensationProblem(sent);
    if (order) add(r.compensationOrder, `${s.sagaId} (${order})`);
    const frozen = sentWhileFrozen(lines, sent);
    if (frozen) add(r.afterAttention, `${s.sagaId} (${frozen})`);
  }
  return {
    report: r,
    violations: [
      ...breached('saga-stuck', null, r.stuck, 'sagas waiting on no live timer'),
      ...unsettled('saga-unsettled', null, r.unsettled, 'sagas neither ended nor frozen for an operator', opts.final),
      ...breached('saga-history', null, r.historyBroken, 'sagas whose transitions are not one per version'),
      ...breached('saga-command-twice', null, r.commandsTwice, 'saga steps sent forward twice'),
      ...breached('saga-compensation-order', null, r.compensationOrder, 'sagas compensated out of order'),
      ...breached('saga-command-after-attention', null, r.afterAttention, 'sagas that sent while frozen'),
    ],
  };
}

type Instance = SagaFacts['instances'][number];
type Line = SagaFacts['history'][number];
type Command = SagaFacts['commands'][number];

function historyProblem(s: Instance, lines: Line[], sent: Command[]): string | null {
  const versions = lines.map((l) => l.version).sort((a, b) => a - b);
  for (let i = 0; i < versions.length; i++) {
    if (versions[i] !== i + 1) return `history versions ${versions.join(',')} for version ${s.version}`;
  }
  if (versions.length !== s.version) return `${versions.length} history lines for version ${s.version}`;
  const counted = s.sends.reduce((a, b) => a + b, 0);
  if (counted !== sent.length) return `${sent.length} commands in the outbox, ${counted} counted by the saga`;
  return null;
}

function forwardTwice(sent: Command[]): string | null {
  const seen = new Set<string>();
  for (const c of sent) {
    if (c.direction !== 'forward') continue;
    if (seen.has(c.step)) return c.step;
    seen.add(c.step);
  }
  return null;
}

/** Steps are numbered by their first forward command (sent in the definition's order). */
function compensationProblem(sent: Command[]): string | null {
  const index = new Map<string, number>();
  let last = Number.POSITIVE_INFINITY;
  for (const c of sent) {
    if (c.direction === 'forward' && !index.has(c.step)) index.set(c.step, index.size);
    if (c.direction !== 'compensate' || c.attempt !== 1) continue;
    const at = index.get(c.step);
    if (at === undefined) return `compensation of ${c.step}, which was never sent forward`;
    if (at >= last) return `compensation of ${c.step} after a later step's`;
    last = at;
  }
  return null;
}

/** A command written between a needs_attention line and the saga's next line (an operator's) broke the freeze. */
function sentWhileFrozen(lines: Line[], sent: Command[]): string | null {
  const byVersion = [...lines].sort((a, b) => a.version - b.version);
  for (let i = 0; i < byVersion.length; i++) {
    if (byVersion[i]!.to !== 'needs_attention') continue;
    const from = byVersion[i]!.at;
    const until = byVersion[i + 1]?.at ?? Number.POSITIVE_INFINITY;
    const c = sent.find((x) => x.createdAt >= from && x.createdAt < until);
    if (c) return `${c.direction} command to ${c.step} while frozen`;
  }
  return null;
}

function group<T>(items: T[], key: (t: T) => string): Map<string, T[]> {
  const m = new Map<string, T[]>();
  for (const t of items) {
    const list = m.get(key(t));
    if (list) list.push(t);
    else m.set(key(t), [t]);
  }
  return m;
}
