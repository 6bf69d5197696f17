// Compiled, never run: every published entry point resolves to real declarations, and misuse is a type error
// (each @ts-expect-error fails the build if the types collapse to `any`).
import { defineConsumer, enqueue, migrate, siblingModule, type Envelope, type Tx } from '@postbox/engine';
import { Relay } from '@postbox/engine/runtime';
import { parseBrokers } from '@postbox/engine/kafka';
import { outboxBacklog } from '@postbox/engine/control';
import { verify } from '@postbox/engine/verify';
import { readMigrations } from '@postbox/engine/testing';
import { BullmqRetryScheduler } from '@postbox/engine/bullmq';
import { participant } from '@postbox/engine/saga';
import { Reconciler } from '@postbox/engine/reconcile';
import { parseNatsServers } from '@postbox/engine/nats';
import { queueName } from '@postbox/engine/rabbitmq';
import { resolveRetentionPolicy } from '@postbox/engine/retention';
import { pgExecutor } from '@postbox/engine/pg';
import { prismaExecutor } from '@postbox/engine/prisma';
import { typeormExecutor } from '@postbox/engine/typeorm';
import { createConsumePool, startConsumer } from '@postbox/workers';
import { readConfig, startControlPlane } from '@postbox/api';
import { migrateDemo } from '@postbox/api/demo';
import { demoOrderSource } from '@postbox/api/demo/reconcile';

export const entryPoints = [
  defineConsumer, migrate, siblingModule, Relay, parseBrokers, outboxBacklog, verify, readMigrations,
  BullmqRetryScheduler, participant, Reconciler, parseNatsServers, queueName, resolveRetentionPolicy,
  pgExecutor,
  prismaExecutor,
  typeormExecutor,
  createConsumePool, startConsumer, readConfig, startControlPlane, migrateDemo, demoOrderSource,
];

export async function misuse(tx: Tx, event: Envelope): Promise<void> {
  // @ts-expect-error aggregate_version is required
  await enqueue(tx, { event_type: 'X', aggregate_id: 'a', data: {} }, { topic: 't' });
  // @ts-expect-error the topic is required
  await enqueue(tx, { event_type: 'X', aggregate_id: 'a', aggregate_version: 1, data: {} }, {});
  // @ts-expect-error an envelope's version is a number
  const version: string = event.aggregate_version;
  // @ts-expect-error a consumer needs topics
  defineConsumer({ name: 'c', handler: new URL('file:///h.js') });
  void version;
}
