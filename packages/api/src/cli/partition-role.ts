import { connect, type Logger } from '@postbox/engine';
import { PartitionMaintenance } from '@postbox/engine/retention';
import { createBrokerOffsets } from '@postbox/workers';
import type { PostboxConfig } from '../config/env.ts';
import type { RoleSet } from './role-set.ts';

/**
 * The partitions ahead, kept made by this process (partition-maintenance.ts): every long-running command starts
 * it, so any one of them running is enough. One connection of its own, idle between checks.
 */
export async function startPartitionRole(roles: RoleSet, config: PostboxConfig, log: Logger): Promise<void> {
  await roles.start(
    'partitions',
    async () => {
      // Two connections: a retention run holds its lock on one while it works on the other.
      const sql = connect({ url: config.databaseUrl, max: 3, applicationName: 'postbox-partitions' });
      const offsets = createBrokerOffsets(config.broker, config.topics);
      const maintenance = new PartitionMaintenance({
        sql,
        options: config.partitions,
        log,
        ...(config.retentionSchedule
          ? { retention: config.retention, brokerRetention: (topics: string[]) => offsets.retention(topics) }
          : {}),
      });
      await maintenance.start();
      return { sql, maintenance, offsets };
    },
    async ({ sql, maintenance, offsets }) => {
      await maintenance.stop();
      await offsets.close();
      await sql.end({ timeout: 5 });
    },
  );
}
