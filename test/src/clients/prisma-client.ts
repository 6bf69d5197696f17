// The suite's Prisma client: generated from fixtures/schema.prisma into test/.generated/prisma (gitignored) once
// per process. Prisma 7's client needs no engine binary at run time (its query compiler is WebAssembly); the CLI
// still looks for a schema engine before `generate` and would download one, which this machine cannot: pointing
// PRISMA_SCHEMA_ENGINE_BINARY at any file skips that, and `generate` does not run it.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const SCHEMA = fileURLToPath(new URL('./fixtures/schema.prisma', import.meta.url));
const GENERATED = path.join(ROOT, 'test/.generated/prisma/client.ts');

/** The parts of the generated client the tests use (the generated types stay out of the typecheck). */
export interface ExamplePrisma {
  $transaction<T>(
    fn: (tx: ExamplePrismaTx) => Promise<T>,
    options?: { maxWait?: number; timeout?: number },
  ): Promise<T>;
  $disconnect(): Promise<void>;
  $queryRawUnsafe<T = unknown>(query: string, ...values: unknown[]): Promise<T>;
}

export interface ExamplePrismaTx {
  $queryRawUnsafe<T = unknown>(query: string, ...values: unknown[]): Promise<T>;
  order: { create(args: { data: { id: string; total: number } }): Promise<unknown> };
  clientOrder: { create(args: { data: { order_id: string; client: string } }): Promise<unknown> };
  clientProjection: {
    upsert(args: {
      where: { client_order_id: { client: string; order_id: string } };
      create: { client: string; order_id: string; amount: number; tags: string[]; doc: object };
      update: { applied: { increment: number } };
    }): Promise<unknown>;
    findMany(args: {
      where: { client: string; order_id: string };
      select: { amount: true; tags: true; doc: true };
    }): Promise<Array<{ amount: number; tags: string[]; doc: unknown }>>;
  };
}

export type ExamplePrismaClass = new (options: { adapter: unknown }) => ExamplePrisma;

let generated: Promise<{ PrismaClient: ExamplePrismaClass }> | undefined;

export function generatedPrismaClient(): Promise<{ PrismaClient: ExamplePrismaClass }> {
  generated ??= (async () => {
    const run = spawnSync(
      process.execPath,
      [path.join(ROOT, 'node_modules/prisma/build/index.js'), 'generate', '--schema', SCHEMA],
      {
        cwd: ROOT,
        encoding: 'utf8',
        env: { ...process.env, PRISMA_SCHEMA_ENGINE_BINARY: '/bin/false', CHECKPOINT_DISABLE: '1' },
        timeout: 120_000,
      },
    );
    assert.equal(run.status, 0, `prisma generate: ${run.stdout}${run.stderr}`);
    return import(GENERATED);
  })();
  return generated;
}

/**
 * The client generatedPrismaClient() generated, without generating: for a handler in a consumer's worker thread
 * (module state is per thread; the test process generates it before the consumer starts).
 */
export async function loadGeneratedPrismaClient(): Promise<{ PrismaClient: ExamplePrismaClass }> {
  return import(GENERATED);
}
