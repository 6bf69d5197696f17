import type { Queryable } from '../db/connect.ts';

export type ParticipationStatus = 'applied' | 'compensated' | 'fenced';

export interface Participation {
  status: ParticipationStatus;
  /** The reply sent when the step was decided: `{ type, data }`, re-sent for a repeated command. */
  result: { type: string; data: unknown } | null;
}

/**
 * Claims a participant's record of a step before the decision about it: inserted fenced (no reply) unless one
 * exists. A concurrent claim of the same step waits for the first transaction and then finds its record, so two
 * deliveries at once are decided one after the other — never a unique violation. The placeholder is visible to no
 * one before commit, and the decision (recordParticipation) replaces it in the same transaction.
 * Parameters: participant, step key. Returns: true when this transaction created the record (the step was never
 * seen). Locks: the row until commit (new, or waited for).
 */
export async function claimParticipation(sql: Queryable, participant: string, stepKey: string): Promise<boolean> {
  const rows = await sql`
    INSERT INTO saga_participation (participant, step_key, status, result)
    VALUES (${participant}, ${stepKey}, 'fenced', NULL)
    ON CONFLICT (participant, step_key) DO NOTHING
    RETURNING 1`;
  return rows.length === 1;
}

/**
 * A participant's record of one saga step, locked for the decision about it.
 * Parameters: participant, step key. Returns: the record, or undefined when the step was never seen.
 * Locks: the row until commit — a command, its query and its compensation arriving at once are decided one after
 * the other (claimParticipation first makes sure the row exists).
 */
export async function lockParticipation(
  sql: Queryable,
  participant: string,
  stepKey: string,
): Promise<Participation | undefined> {
  const [row] = await sql<Participation[]>`
    SELECT status, result FROM saga_participation
    WHERE participant = ${participant} AND step_key = ${stepKey} FOR UPDATE`;
  return row;
}

/**
 * Records the decision about a step, over the transaction's claim (or an earlier decision).
 * Parameters: participant, step key, status, the reply. Locks: the row.
 */
export async function recordParticipation(
  sql: Queryable,
  participant: string,
  stepKey: string,
  status: ParticipationStatus,
  result: Participation['result'],
): Promise<void> {
  const json = result === null ? null : sql.json(result as never);
  await sql`
    INSERT INTO saga_participation (participant, step_key, status, result)
    VALUES (${participant}, ${stepKey}, ${status}, ${json})
    ON CONFLICT (participant, step_key) DO UPDATE SET status = EXCLUDED.status, result = EXCLUDED.result,
                                                      updated_at = now()`;
}

/**
 * Whether a reply (an outbox event of the participant) was already written for one command: a repeated command
 * answered from the step record must not write its reply twice (the outbox's unique (aggregate, version)).
 * Parameters: the reply's aggregate and version. Returns: true when written. Locks: none (a
 * writer of the same key waits on the registry's unique index in its own insert).
 */
export async function replyWritten(sql: Queryable, aggregateId: string, version: number): Promise<boolean> {
  // The outbox's (aggregate, version) registry (0016): its primary key is exactly this pair, where the partitioned
  // outbox has no index on it; and the consumer role may read it (role-grants.ts), not the outbox's columns.
  const rows = await sql`
    SELECT 1 FROM message_outbox_key WHERE aggregate_id = ${aggregateId} AND aggregate_version = ${version}`;
  return rows.length === 1;
}
