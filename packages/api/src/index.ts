// Public surface of @postbox/api. The local stack manager is exported separately as @postbox/api/stack.
export { readConfig, parseTopics, type PostboxConfig } from './config/env.ts';
export { startRelay } from './cli/relay-role.ts';
