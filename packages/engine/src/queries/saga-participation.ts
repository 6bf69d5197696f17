import type { Queryable } from '../db/connect.ts';

export type ParticipationStatus = 'applied' | 'compensated' | 'fenced';

export interface Participation {
  status: ParticipationStatus;
  /** The reply sent when the step was decided: `{ type, data }`, re-sent for a repeated command. */
  result: { type: string; data: unknown } | null;
}

/**
 * A participant's record of one saga step, locked for the decision about it.
 * Parameters: participant, step key. Returns: the record, or undefined when the step was never seen.
 * Locks: the row until commit — a command, its query and its compensation arriving at once are decided one after
 * the other (an absent row is created fenced by whoever records first; see recordParticipation).
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
 * Records the decision about a step. A first record that loses a race to a concurrent one fails on the primary key
 * (the transaction retries and then sees the winner's record).
 * Parameters: participant, step key, status, the reply. Locks: the row.
 */
export async function recordParticipation(
  sql: Queryable,
  participant: string,
  stepKey: string,
  status: ParticipationStatus,
  result: Participation['result'],
  existed: boolean,
): Promise<void> {
  const json = result === null ? null : sql.json(result as never);
  if (existed) {
    await sql`
      UPDATE saga_participation SET status = ${status}, result = ${json}, updated_at = now()
      WHERE participant = ${participant} AND step_key = ${stepKey}`;
  } else {
    await sql`
      INSERT INTO saga_participation (participant, step_key, status, result)
      VALUES (${participant}, ${stepKey}, ${status}, ${json})`;
  }
}
