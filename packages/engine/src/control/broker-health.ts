import type { BrokerHealthReport } from '../ports/broker-health.ts';
import type { BrokerOffsets } from '../ports/offsets.ts';
import { observeBrokerHealth } from '../telemetry/metrics.ts';

export interface BrokerHealthMonitorOptions {
  /** The control plane's broker door; without `health` (NATS, RabbitMQ) the monitor reports nothing. */
  offsets: BrokerOffsets;
  /** Postbox's topics: those the relay publishes to and the consumers read. */
  topics: string[];
}

/**
 * The broker's replica health, sampled by the control plane. It lives there because that process already holds
 * the admin client (BrokerOffsets) and the topic list, and because the cluster's state is one fact: sampled by
 * every relay it would be exported once per relay process (N copies of each series to deduplicate in every
 * alert), and its admin round trips would sit beside the relay's publish path on the same event loop.
 *
 *   idle ──start()──▶ sampling (a probe every intervalMs, one at a time) ──stop()──▶ stopped
 *
 * `probe()` reads now and is shared with a sample in flight; `current()` (GraphQL) reuses a report a few seconds
 * old. The probe never throws (a failed one is a report that says why), so neither the timer nor a caller can die
 * of a broker that does not answer.
 */
export class BrokerHealthMonitor {
  readonly #o: BrokerHealthMonitorOptions;
  #latest: BrokerHealthReport | null = null;
  #inFlight: Promise<BrokerHealthReport> | null = null;
  #timer: NodeJS.Timeout | null = null;
  #unobserve: (() => void) | null = null;

  constructor(options: BrokerHealthMonitorOptions) {
    this.#o = options;
  }

  /** False for a broker without replica health (the GraphQL field is null then). */
  get supported(): boolean {
    return this.#o.offsets.health !== undefined;
  }

  /** The last report, or null before the first. */
  latest(): BrokerHealthReport | null {
    return this.#latest;
  }

  /** Probes every `intervalMs` and exports the gauges (telemetry/broker-metrics.ts) from the last report. */
  start(intervalMs = 15_000): void {
    if (this.#timer || !this.supported) return;
    this.#unobserve = observeBrokerHealth(this, () => this.#latest);
    this.#timer = setInterval(() => void this.probe(), intervalMs);
    this.#timer.unref();
    void this.probe();
  }

  /** Stops sampling and waits for a probe in flight, so the admin client can be closed after. */
  async stop(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
    this.#unobserve?.();
    this.#unobserve = null;
    await this.#inFlight;
  }

  /** The last report if it is younger than `maxAgeMs`, else a fresh one: a dashboard polling fast probes no faster. */
  async current(maxAgeMs = 5000): Promise<BrokerHealthReport | null> {
    const latest = this.#latest;
    if (latest && Date.now() - latest.at.getTime() < maxAgeMs) return latest;
    return this.probe();
  }

  /** A fresh report (null for a broker without replica health); one probe at a time, shared by callers. */
  async probe(): Promise<BrokerHealthReport | null> {
    const health = this.#o.offsets.health?.bind(this.#o.offsets);
    if (!health) return null;
    this.#inFlight ??= health(this.#o.topics)
      .catch(
        (cause: unknown): BrokerHealthReport => ({
          at: new Date(),
          ok: false,
          error: `broker health probe failed: ${(cause as Error)?.message ?? String(cause)}`,
          brokers: [],
          topics: [],
        }),
      )
      .then((report) => (this.#latest = report))
      .finally(() => (this.#inFlight = null));
    return this.#inFlight;
  }
}
