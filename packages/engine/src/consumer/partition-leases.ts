import type { Sql } from '../db/connect.ts';
import type { PartitionAssignment } from '../ports/partition-assignment.ts';
import type { TopicPartition } from '../ports/subscriber.ts';
import {
  acquireLeases,
  ensureLeaseRows,
  forgetDeadMembers,
  groupCensus,
  leaveGroup,
  memberHeartbeat,
  releaseLeases,
  renewLeases,
} from '../queries/consumer-leases.ts';

export interface PartitionLeaseOptions {
  sql: Sql;
  groupId: string;
  /** This member's name, unique in the group. */
  owner: string;
  /**
   * A member silent this long loses its partitions to the others; leases are renewed every third of it.
   * @defaultValue 15000
   */
  leaseMs?: number;
  /** Told of a balance that failed (the member tries again at the next one). */
  onError?: (error: Error) => void;
}

const key = (p: TopicPartition) => `${p.topic}:${p.partition}`;

/**
 * Partition ownership by leases in PostgreSQL (migration 0015), the way relays share outbox lanes: each live
 * member holds about partitions / live-members partitions and renews them every third of the lease. A member
 * that dies stops renewing; after the lease its partitions are free and the others take them. A member that
 * leaves gives them back at once, once its subscriber has stopped reading them. A member that cannot renew for
 * two thirds of its lease (the database unreachable, a query hanging) tells its subscriber it holds nothing,
 * before another member could take over.
 */
export class PartitionLeases implements PartitionAssignment {
  readonly #options: PartitionLeaseOptions;
  readonly #leaseMs: number;
  #topics: string[] = [];
  #held = new Map<string, TopicPartition>();
  #onChange: (held: TopicPartition[]) => Promise<void> = async () => {};
  #timer: NodeJS.Timeout | null = null;
  #watchdog: NodeJS.Timeout | null = null;
  #balancing: Promise<void> | null = null;
  /** When the last renewal that succeeded was sent: the leases it extended hold until then + leaseMs. */
  #renewedAt = 0;
  #left: Promise<void> | null = null;

  constructor(options: PartitionLeaseOptions) {
    this.#options = options;
    this.#leaseMs = options.leaseMs ?? 15_000;
  }

  async join(partitions: TopicPartition[], onChange: (held: TopicPartition[]) => Promise<void>): Promise<void> {
    if (this.#timer || this.#left) throw new Error('partition leases: already joined');
    this.#topics = [...new Set(partitions.map((p) => p.topic))];
    this.#onChange = onChange;
    await ensureLeaseRows(this.#options.sql, this.#options.groupId, partitions);
    await this.#balance();
    // Left while joining (its subscriber closed meanwhile): no timers, or the process would never exit.
    if (this.#left) return;
    this.#timer = setInterval(() => {
      // A balance still running (a slow database) is not queued behind: the next tick tries again.
      if (this.#balancing || this.#left) return;
      this.#balancing = this.#balance()
        .catch((cause: unknown) => this.#options.onError?.(cause as Error))
        .finally(() => (this.#balancing = null));
    }, this.#leaseMs / 3);
    // Whether or not a balance is stuck (a black-holed connection), a member whose leases may be ending stops
    // reading before anyone else could take over.
    this.#watchdog = setInterval(() => {
      if (this.#held.size > 0 && Date.now() - this.#renewedAt > (this.#leaseMs * 2) / 3) void this.#set([]);
    }, this.#leaseMs / 6);
  }

  leave(): Promise<void> {
    this.#left ??= (async () => {
      if (this.#timer) clearInterval(this.#timer);
      if (this.#watchdog) clearInterval(this.#watchdog);
      await this.#balancing;
      await this.#set([]);
      await leaveGroup(this.#options.sql, this.#options.groupId, this.#options.owner);
    })();
    return this.#left;
  }

  async #balance(): Promise<void> {
    const { sql, groupId: group, owner } = this.#options;
    await memberHeartbeat(sql, group, owner);
    const sentAt = Date.now();
    const renewed = await renewLeases(sql, group, owner, this.#leaseMs);
    this.#renewedAt = sentAt;
    const { members, partitions } = await groupCensus(sql, group, this.#topics, this.#leaseMs);
    const share = Math.ceil(partitions / Math.max(1, members));
    const gained =
      renewed.length < share
        ? await acquireLeases(sql, group, this.#topics, owner, share - renewed.length, this.#leaseMs)
        : [];
    const owned = [...renewed, ...gained].sort((a, b) => key(a).localeCompare(key(b)));
    const surplus = owned.slice(share);
    // The subscriber stops reading a surplus partition before it is given back.
    await this.#set(owned.slice(0, share));
    await releaseLeases(sql, group, owner, surplus);
    if (Math.random() < 0.05) await forgetDeadMembers(sql, group, this.#leaseMs);
  }

  /** Tells the subscriber of a changed set; resolves once it has stopped reading what it lost. */
  async #set(held: TopicPartition[]): Promise<void> {
    const next = new Map(held.map((p) => [key(p), { topic: p.topic, partition: p.partition }]));
    const same = next.size === this.#held.size && [...next.keys()].every((k) => this.#held.has(k));
    this.#held = next;
    if (!same) await this.#onChange([...next.values()]);
  }
}
