import type { Sql } from '@postbox/engine';
import type { BacklogMonitor, Probe } from '@postbox/engine/control';
import type { RetryScheduler } from '@postbox/engine/runtime';
import type { Caller } from './auth.ts';

/** What resolvers may use: engine functions over these, nothing else. */
export interface ApiDeps {
  sql: Sql;
  backlog: BacklogMonitor;
  /** The retry scheduler of a consumer (one queue each); null without Redis. */
  schedulerFor: (consumer: string) => RetryScheduler | null;
  probes: Record<string, Probe>;
}

export interface ApiContext {
  caller: Caller;
  deps: ApiDeps;
  production: boolean;
  /** Audit writes started during the request (denials); awaited before the response is sent. */
  audits: Promise<unknown>[];
}
