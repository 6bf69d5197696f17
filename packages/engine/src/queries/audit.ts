import type { Queryable } from '../db/connect.ts';

export interface AuditEntry {
  actor: string;
  action: string;
  reason: string | null;
  target: string | null;
  before: unknown;
  after: unknown;
  outcome?: string;
}

/** Appends one operator action to the audit log, in the caller's transaction. Locks: none. */
export async function insertAudit(tx: Queryable, e: AuditEntry): Promise<number> {
  const [row] = await tx<{ audit_id: string }[]>`
    INSERT INTO operator_audit (actor, action, reason, target, before, after, outcome)
    VALUES (${e.actor}, ${e.action}, ${e.reason}, ${e.target},
            ${e.before === undefined ? null : tx.json(e.before as never)}, ${e.after === undefined ? null : tx.json(e.after as never)},
            ${e.outcome ?? 'ok'})
    RETURNING audit_id`;
  return Number(row!.audit_id);
}
