import type { InboundRecord, SubscriberSink, TopicPartition } from '@postbox/engine/runtime';

/** A subscriber sink that records what it is given; `cap` makes it take at most that many records in all. */
export class RecordingSink implements SubscriberSink {
  records: InboundRecord[] = [];
  assignments: TopicPartition[][] = [];
  cap = Number.POSITIVE_INFINITY;
  /** Called when the sink takes fewer records than it was offered (the consumer pauses then). */
  onFull: () => void = () => {};

  onRecords(records: InboundRecord[]): number {
    const n = Math.max(0, Math.min(records.length, this.cap - this.records.length));
    this.records.push(...records.slice(0, n));
    if (n < records.length) this.onFull();
    return n;
  }

  onAssignment(partitions: TopicPartition[]): void {
    this.assignments.push(partitions);
  }

  /** The partitions of the last assignment, as "topic:partition", sorted. */
  held(): string[] {
    return (this.assignments.at(-1) ?? []).map((p) => `${p.topic}:${p.partition}`).sort();
  }
}
