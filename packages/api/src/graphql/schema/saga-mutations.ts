import type { SagaAction } from '@postbox/engine/saga';
import { actOnSaga } from '../../sagas/act.ts';
import { builder } from '../builder.ts';
import type { ApiContext } from '../context.ts';
import { invalid, requiredText, uuid } from '../validate.ts';
import { MUTATION_ERRORS } from './errors.ts';
import { audited } from './mutations.ts';
import { sagaById, SagaRef } from './saga.ts';

// Operator actions on sagas (engine: saga/operator-actions.ts). Each runs in one transaction — the saga row
// locked, the transition by the machine's rules, its history line under the caller, the audit record with before
// and after — and returns the saga as it is now; a refusal (not allowed in this state, no such saga, no
// definition loaded) is a typed result, audited, with nothing changed.

const SagaStepOutcomeEnum = builder.enumType('SagaStepOutcome', {
  description: 'What the operator found out about the step: applied (the saga goes on) or not (a refusal)',
  values: { APPLIED: { value: 'applied' }, NOT_APPLIED: { value: 'not_applied' } } as const,
});

async function act(ctx: ApiContext, rawId: string, action: SagaAction, reason: string) {
  const sagaId = uuid('sagaId', rawId, 'a saga id');
  return audited(ctx, `saga.${action.kind}`, sagaId, reason, async () => {
    await actOnSaga(ctx.deps.sql, ctx.deps.sagas, sagaId, action, { actor: ctx.caller.actor, reason });
    return (await sagaById(ctx.deps.sql, sagaId))!;
  });
}

/** A mutation that takes the saga and a reason, and nothing else. */
function simpleAction(name: string, kind: 'retry' | 'compensate' | 'resume' | 'close', description: string) {
  builder.mutationField(name, (t) =>
    t.field({
      type: SagaRef,
      description,
      authScopes: kind === 'close' ? { admin: true } : { operator: true },
      errors: { types: MUTATION_ERRORS },
      args: { sagaId: t.arg.id({ required: true }), reason: t.arg.string({ required: true }) },
      resolve: (_root, args, ctx) => act(ctx, String(args.sagaId), { kind }, requiredText('reason', args.reason)),
    }),
  );
}

simpleAction(
  'retrySagaStep',
  'retry',
  'One more attempt of the command out (a forward command is asked about, never re-sent blind)',
);
simpleAction(
  'compensateSaga',
  'compensate',
  'Undo what succeeded, last first; refused after the pivot and while the pivot’s command is out',
);
simpleAction(
  'resumeSaga',
  'resume',
  'Automation back on for a frozen saga (after a deadline past the pivot: the deadline is lifted)',
);
simpleAction('closeSaga', 'close', 'Ends the saga as closed_manually: nothing more is sent, nothing undone (admin)');

builder.mutationField('resolveSagaStep', (t) =>
  t.field({
    type: SagaRef,
    description:
      'States the outcome of the step the saga could not learn, with the evidence (APPLIED goes on, NOT_APPLIED is a refusal)',
    authScopes: { operator: true },
    errors: { types: MUTATION_ERRORS },
    args: {
      sagaId: t.arg.id({ required: true }),
      outcome: t.arg({ type: SagaStepOutcomeEnum, required: true }),
      evidence: t.arg.string({ required: true, description: 'How the outcome is known (goes to history and audit)' }),
      data: t.arg({ type: 'JSON', description: 'APPLIED only: the step’s result, as its success reply would carry' }),
      reason: t.arg.string({ required: true }),
    },
    resolve: (_root, args, ctx) => {
      const reason = requiredText('reason', args.reason);
      const evidence = requiredText('evidence', args.evidence, 1000);
      if (args.data != null && args.outcome !== 'applied') throw invalid('data', 'only with outcome APPLIED');
      if (args.data != null && JSON.stringify(args.data).length > 16_384)
        throw invalid('data', 'must be at most 16384 characters of JSON');
      const action: SagaAction =
        args.outcome === 'applied'
          ? { kind: 'resolve', outcome: 'applied', ...(args.data == null ? {} : { data: args.data }) }
          : { kind: 'resolve', outcome: 'not_applied' };
      return act(ctx, String(args.sagaId), action, `${reason} (evidence: ${evidence})`);
    },
  }),
);

builder.mutationField('markStepCompensated', (t) =>
  t.field({
    type: SagaRef,
    description:
      'The step whose compensation was refused (or ran out of attempts) was undone by hand: compensation goes on',
    authScopes: { operator: true },
    errors: { types: MUTATION_ERRORS },
    args: {
      sagaId: t.arg.id({ required: true }),
      step: t.arg.string({ required: true, description: 'The step being compensated (a check: named, not implied)' }),
      reason: t.arg.string({ required: true }),
    },
    resolve: (_root, args, ctx) => {
      const step = requiredText('step', args.step, 100);
      return act(ctx, String(args.sagaId), { kind: 'mark_compensated', step }, requiredText('reason', args.reason));
    },
  }),
);
