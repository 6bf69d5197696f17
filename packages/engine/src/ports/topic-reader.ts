import type { InboundRecord } from './subscriber.ts';

/** One partition's log bounds when it was read. */
export interface LogBounds {
  topic: string;
  partition: number;
  /** First offset still in the log. */
  low: string;
  /** The end offset (next to be written) when reading started: every record below it was read. */
  high: string;
}

/**
 * Reads whole topics, start to end, outside any consumer group's progress (the verifier's view of the log).
 *
 * Contract: the end offsets are taken first; every record of every partition from its log start up to that end
 * is passed to `onRecord`, in offset order per partition, and nothing past it; then the bounds are returned. The
 * record's value may be a view into a larger buffer: use it within the callback, keep only what you need.
 * Throws (with the cause) when the broker cannot be read or the end is not reached within the timeout.
 */
export interface TopicReader {
  read(topics: string[], onRecord: (record: InboundRecord) => void): Promise<LogBounds[]>;
  close(): Promise<void>;
}
