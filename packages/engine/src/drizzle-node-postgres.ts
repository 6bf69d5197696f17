// @postbox/engine/drizzle/node-postgres (needs drizzle-orm and pg): drizzleFor, a node-postgres Drizzle database
// bound to a consumer handler's transaction.
export { drizzleFor } from './adapters/sql/drizzle-handle.ts';
