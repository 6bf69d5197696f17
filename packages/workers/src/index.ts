export { createPublishPool, type PublishPoolOptions } from './pools.ts';
export type { PublishWorkerData } from './publish-worker-data.ts';
