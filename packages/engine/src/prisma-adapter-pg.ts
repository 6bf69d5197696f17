// @postbox/engine/prisma/adapter-pg (needs @prisma/adapter-pg 7): prismaBinding, Prisma transaction clients bound to
// consumer handlers' transactions.
export {
  prismaBinding,
  type PrismaBinding,
  type PrismaClientFactory,
  type PrismaClientLike,
} from './adapters/sql/prisma-handle.ts';
