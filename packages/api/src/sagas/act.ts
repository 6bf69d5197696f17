import { ActionRefusedError, type Sql } from '@postbox/engine';
import { SagaOrchestrator, type SagaAction, type SagaState, type StepStatus } from '@postbox/engine/saga';

// Acting needs the definition (the commands are built from it); without any loaded, every action is refused.
const NONE = new SagaOrchestrator([]);

/**
 * An operator's action on a saga in one transaction (SagaOrchestrator.act: the row locked, the transition by the
 * machine's rules, its history line under the actor, the audit record with before and after). Throws
 * NotFoundError, or ActionRefusedError with what the state allows — or that this process loads no definition
 * for the saga's type and version, and where it would come from.
 */
export async function actOnSaga(
  sql: Sql,
  orchestrator: SagaOrchestrator | undefined,
  sagaId: string,
  action: SagaAction,
  by: { actor: string; reason: string },
): Promise<{ before: SagaState; after: SagaState }> {
  try {
    return await sql.begin((tx) => (orchestrator ?? NONE).act(tx, sagaId, action, by));
  } catch (error) {
    if (error instanceof ActionRefusedError && error.code === 'saga_definition_missing') {
      throw new ActionRefusedError(
        error.code,
        `${error.message}: the control plane acts only on the sagas whose definitions it loads (POSTBOX_SAGA_MODULES)`,
      );
    }
    throw error;
  }
}

/** What an operator sees of a step: its name and shape from the definition (null when not loaded), its status. */
export interface SagaStepView {
  index: number;
  name: string | null;
  status: StepStatus;
  pivot: boolean | null;
  compensable: boolean | null;
  /** Commands sent to the step so far (forward, queries, compensations). */
  sends: number;
}

export function sagaSteps(orchestrator: SagaOrchestrator | undefined, state: SagaState): SagaStepView[] {
  const definition = orchestrator?.definitionOf(state);
  return state.steps.map((status, index) => {
    const step = definition?.steps[index];
    return {
      index,
      name: step?.name ?? null,
      status,
      pivot: step ? step.pivot : null,
      compensable: step ? step.compensate !== null : null,
      sends: state.sends[index] ?? 0,
    };
  });
}

/** What an operator may do to the saga now: nothing when its definition is not loaded. */
export function sagaAllowedActions(orchestrator: SagaOrchestrator | undefined, state: SagaState) {
  return (orchestrator ?? NONE).allowedActions(state);
}
