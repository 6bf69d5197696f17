import { ActionRefusedError, ConfigError, NotFoundError } from '@postbox/engine';
import { builder } from '../builder.ts';

/** Expected failures of mutations are results (a union member), not exceptions in `errors`. */
export const ErrorInterface = builder.interfaceRef<Error & { code?: string }>('Error').implement({
  fields: (t) => ({
    message: t.exposeString('message'),
    code: t.string({ resolve: (e) => e.code ?? 'error' }),
  }),
});

builder.objectType(NotFoundError, {
  name: 'NotFoundError',
  interfaces: [ErrorInterface],
  isTypeOf: (e) => e instanceof NotFoundError,
  fields: () => ({}),
});
builder.objectType(ActionRefusedError, {
  name: 'ActionRefusedError',
  description: 'Not possible in the current state; nothing changed',
  interfaces: [ErrorInterface],
  isTypeOf: (e) => e instanceof ActionRefusedError,
  fields: () => ({}),
});
builder.objectType(ConfigError, {
  name: 'InvalidRequestError',
  description: 'The request cannot be carried out as given (e.g. an edited payload for many failures)',
  interfaces: [ErrorInterface],
  isTypeOf: (e) => e instanceof ConfigError,
  fields: () => ({}),
});

export const MUTATION_ERRORS = [NotFoundError, ActionRefusedError, ConfigError];
