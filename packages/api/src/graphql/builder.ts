// The schema modules' declarations name the global PothosSchemaTypes namespace, which these packages declare:
// kept in the published .d.ts so a service's own type check (skipLibCheck off) finds it.
/// <reference types="@pothos/core" preserve="true" />
/// <reference types="@pothos/plugin-errors" preserve="true" />
/// <reference types="@pothos/plugin-relay" preserve="true" />
/// <reference types="@pothos/plugin-scope-auth" preserve="true" />
import SchemaBuilder from '@pothos/core';
import ErrorsPlugin from '@pothos/plugin-errors';
import RelayPlugin from '@pothos/plugin-relay';
import ScopeAuthPlugin from '@pothos/plugin-scope-auth';
import { GraphQLError } from 'graphql';
import { insertAudit } from '@postbox/engine/control';
import type { ApiContext } from './context.ts';

export interface PostboxSchemaTypes {
  Context: ApiContext;
  AuthScopes: { viewer: boolean; operator: boolean; admin: boolean; payload: boolean };
  Scalars: {
    DateTime: { Input: Date; Output: Date };
    JSON: { Input: unknown; Output: unknown };
  };
  DefaultFieldNullability: false;
}

/**
 * The one schema builder. Scope-auth runs first so that nothing (not even an error union) resolves for a
 * caller without the scope; every denial of a mutation is audited with the caller's identity.
 */
export const builder = new SchemaBuilder<PostboxSchemaTypes>({
  plugins: [ScopeAuthPlugin, ErrorsPlugin, RelayPlugin],
  defaultFieldNullability: false,
  scopeAuth: {
    authScopes: (ctx) => ({
      viewer: ctx.caller.scopes.has('viewer'),
      operator: ctx.caller.scopes.has('operator'),
      admin: ctx.caller.scopes.has('admin'),
      payload: ctx.caller.scopes.has('payload'),
    }),
    unauthorizedError: (_parent, ctx, info) => {
      if (info.parentType.name === 'Mutation') {
        ctx.audits.push(
          insertAudit(ctx.deps.sql, {
            actor: ctx.caller.actor,
            action: info.fieldName,
            reason: null,
            target: null,
            before: null,
            after: { variables: Object.keys(info.variableValues ?? {}) },
            outcome: 'denied',
          }).catch(() => {}),
        );
      }
      const who = ctx.caller.actor === 'anonymous' ? 'no valid bearer token' : `${ctx.caller.actor} lacks the scope`;
      return new GraphQLError(`not allowed: ${info.parentType.name}.${info.fieldName} (${who})`, {
        extensions: { code: 'FORBIDDEN' },
      });
    },
  },
  relay: { cursorType: 'String', clientMutationId: 'omit', nodeQueryOptions: false, nodesQueryOptions: false },
  errors: { defaultTypes: [] },
});

builder.queryType({});
builder.mutationType({});
builder.subscriptionType({});
