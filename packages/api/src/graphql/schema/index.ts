// The control plane's schema: one module per domain type, each registering its fields on the builder.
import { lexicographicSortSchema, printSchema, type GraphQLSchema } from 'graphql';
import { builder } from '../builder.ts';
import './scalars.ts';
import './errors.ts';
import './backlog.ts';
import './event.ts';
import './failure.ts';
import './audit.ts';
import './health.ts';
import './broker-health.ts';
import './saga.ts';
import './reconcile.ts';
import './storage.ts';
import './mutations.ts';
import './saga-mutations.ts';
import './reconcile-mutations.ts';

export const schema: GraphQLSchema = builder.toSchema();

/** The SDL committed as schema.graphql; a test fails when the code and the file drift apart. */
export function printedSchema(): string {
  return `${printSchema(lexicographicSortSchema(schema))}\n`;
}
