// Public surface of @postbox/api. The local stack manager is its own package, @postbox/stack (development only).
export { readConfig, parseTopics, type PostboxConfig } from './config/env.ts';
export { linkEnv, type LinkEnv } from './config/links.ts';
export { readApiConfig, parseTokens, apiToken, type ApiConfig, type ApiToken, type Scope } from './config/api.ts';
export { createApiResources, type ApiResourceOptions, type ApiResources } from './graphql/deps.ts';
export { startControlPlane, createControlPlaneHandler, type ControlPlane } from './graphql/server.ts';
export { schema, printedSchema } from './graphql/schema/index.ts';
export type { ApiDeps, ApiContext } from './graphql/context.ts';
export { startTelemetry, type Telemetry, type TelemetryOptions } from './telemetry/sdk.ts';
