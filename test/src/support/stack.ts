import { stackEnv, type StackEnv } from '@postbox/stack';

/** The services the suite runs against: the local stack (`postbox stack up` runs before the suite) or env vars. */
export const stack: StackEnv = stackEnv();
