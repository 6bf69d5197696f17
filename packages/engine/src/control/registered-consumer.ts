import type { Queryable } from '../db/connect.ts';
import { NotFoundError } from '../errors.ts';
import { listConsumers } from '../queries/consumer-registry.ts';

/**
 * Refuses a consumer name no consumer has registered (every consumer registers when it starts). Operator actions
 * that name a consumer check it first, before anything is opened for it: a retry scheduler is a Redis connection,
 * and a caller must not be able to make one per name it invents.
 */
export async function requireRegisteredConsumer(sql: Queryable, consumer: string): Promise<void> {
  const registered = await listConsumers(sql);
  if (!registered.some((c) => c.consumer_name === consumer))
    throw new NotFoundError(`consumer ${consumer} (no consumer of that name has registered)`);
}
