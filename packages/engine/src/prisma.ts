// @postbox/engine/prisma: events written in a Prisma interactive transaction (PostgreSQL).
export { prismaExecutor, type PrismaTransactionLike } from './adapters/sql/prisma.ts';
export type { SqlExecutor, SqlParam } from './ports/sql-executor.ts';
