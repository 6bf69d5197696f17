/**
 * The offset watermark of one partition, pure. Offsets are tracked in the order they were received (Kafka
 * delivers a partition in increasing offset order, possibly with holes: compaction, transaction markers) and
 * settled in any order. The committable offset is one past the highest offset below which every received
 * offset has settled: Kafka's "next offset to read" for this consumer group.
 *
 * Settled = its outcome is durable (applied, duplicate, ignored, parked, or in the failure store). An event
 * that is still retrying holds the watermark of its partition: later offsets may settle, but none is
 * committed past it, so a crash re-reads it (and the inbox absorbs the re-read neighbours).
 */
export class Watermark {
  // Received, not yet passed by the watermark, in increasing order; a ring would do, an array with a moving
  // head is enough (compacted when the head passes half of it).
  #offsets: bigint[] = [];
  #head = 0;
  readonly #settled = new Set<bigint>();
  #committable: bigint | null = null;

  /** Records a received offset. Offsets must be given in increasing order. */
  track(offset: bigint): void {
    const last = this.#offsets.length > this.#head ? this.#offsets[this.#offsets.length - 1]! : null;
    if (last !== null && offset <= last) throw new RangeError(`offset ${offset} tracked after ${last}`);
    this.#offsets.push(offset);
  }

  /** Marks a tracked offset settled; returns true when the committable offset moved. */
  settle(offset: bigint): boolean {
    this.#settled.add(offset);
    let moved = false;
    while (this.#head < this.#offsets.length && this.#settled.has(this.#offsets[this.#head]!)) {
      const passed = this.#offsets[this.#head++]!;
      this.#settled.delete(passed);
      this.#committable = passed + 1n;
      moved = true;
    }
    if (this.#head > 1024 && this.#head * 2 > this.#offsets.length) {
      this.#offsets = this.#offsets.slice(this.#head);
      this.#head = 0;
    }
    return moved;
  }

  /** The offset to commit (next to read), or null when nothing has settled contiguously from the start. */
  committable(): bigint | null {
    return this.#committable;
  }

  /** Tracked offsets not yet passed by the watermark. */
  pending(): number {
    return this.#offsets.length - this.#head;
  }
}
