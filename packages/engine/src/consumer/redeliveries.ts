/**
 * Which records are redeliveries: per partition, the highest offset this consumer ever received, kept across
 * rebalances (a partition revoked and assigned back is read again from its committed offset, and its records
 * are redeliveries even though the consumer forgot what it held). One entry per partition ever assigned.
 *
 * A redelivery of a record another process received first is invisible here: that one is counted where it
 * lands, as the inbox's `duplicate` outcome.
 */
export class Redeliveries {
  readonly #highest = new Map<string, bigint>();

  /** Notes a record taken from the broker; true when its offset is at or below one received before. */
  received(partitionKey: string, offset: bigint): boolean {
    const highest = this.#highest.get(partitionKey);
    if (highest !== undefined && offset <= highest) return true;
    this.#highest.set(partitionKey, offset);
    return false;
  }
}
