import type { Queryable } from '../db/connect.ts';
import type { SagaFacts } from '../records/observation.ts';

/**
 * What the verifier reads of the sagas (verify/collect.ts, in its one REPEATABLE READ snapshot): every instance,
 * every history line, and every command the orchestrator put in the outbox (rows whose producer is `saga:<type>`),
 * in the order they were written. Parameters: none. Locks: none beyond a plain SELECT.
 */
export async function sagaFacts(sql: Queryable): Promise<SagaFacts> {
  const instances = await sql<
    Array<{
      saga_id: string;
      saga_type: string;
      status: SagaFacts['instances'][number]['status'];
      version: string;
      steps: string[];
      sends: number[];
      due_at: Date | null;
      attention_reason: string | null;
    }>
  >`SELECT saga_id, saga_type, status, version::text, steps, sends, due_at, attention_reason FROM saga_instance`;
  const history = await sql<Array<{ saga_id: string; version: string; to_status: string; at: Date }>>`
    SELECT saga_id, version::text, to_status, at FROM saga_history ORDER BY id`;
  const commands = await sql<
    Array<{ saga_id: string; step: string; direction: string; attempt: string; created_at: Date }>
  >`
    SELECT extensions->>'sagaid' AS saga_id, extensions->>'sagastep' AS step,
           extensions->>'sagadirection' AS direction, extensions->>'sagaattempt' AS attempt, created_at
    FROM message_outbox WHERE producer LIKE 'saga:%' ORDER BY seq`;
  return {
    instances: instances.map((r) => ({
      sagaId: r.saga_id,
      type: r.saga_type,
      status: r.status,
      version: Number(r.version),
      steps: r.steps,
      sends: r.sends,
      dueAt: r.due_at?.getTime() ?? null,
      attentionReason: r.attention_reason,
    })),
    history: history.map((r) => ({
      sagaId: r.saga_id,
      version: Number(r.version),
      to: r.to_status,
      at: r.at.getTime(),
    })),
    commands: commands.map((r) => ({
      sagaId: r.saga_id,
      step: r.step,
      direction: r.direction,
      attempt: Number(r.attempt),
      createdAt: r.created_at.getTime(),
    })),
  };
}
