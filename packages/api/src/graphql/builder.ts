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
import { type GraphQLField, GraphQLError } from 'graphql';
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
 * caller without the scope, and for a subscription when it is made (its source never starts for a refused
 * caller); every denial of a mutation, and of a payload-scoped field, is audited with the caller's identity.
 */
export const builder = new SchemaBuilder<PostboxSchemaTypes>({
  plugins: [ScopeAuthPlugin, ErrorsPlugin, RelayPlugin],
  defaultFieldNullability: false,
  scopeAuth: {
    authorizeOnSubscribe: true,
    authScopes: (ctx) => ({
      viewer: ctx.caller.scopes.has('viewer'),
      operator: ctx.caller.scopes.has('operator'),
      admin: ctx.caller.scopes.has('admin'),
      payload: ctx.caller.scopes.has('payload'),
    }),
    unauthorizedError: (parent, ctx, info) => {
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
      } else if (payloadScoped(info.parentType.getFields()[info.fieldName])) {
        const field = `${info.parentType.name}.${info.fieldName}`;
        ctx.deniedReads.set(field, [...(ctx.deniedReads.get(field) ?? []), rowOf(parent)]);
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

/** Whether a field needs the payload scope (its authScopes name it), so that a refused read of it is audited. */
function payloadScoped(field: GraphQLField<unknown, unknown> | undefined): boolean {
  const options = field?.extensions?.pothosOptions as { authScopes?: unknown } | undefined;
  const scopes = options?.authScopes;
  return typeof scopes === 'object' && scopes !== null && 'payload' in scopes;
}

/** The row a payload-scoped field was asked of, as the audit log names targets. */
function rowOf(parent: unknown): string | null {
  const p = parent as { failure_id?: unknown; sagaId?: unknown } | null;
  if (p?.failure_id != null) return `failure:${String(p.failure_id)}`;
  if (p?.sagaId != null) return `saga:${String(p.sagaId)}`;
  return null;
}
