import {
  createNoopMeter,
  metrics,
  ValueType,
  type BatchObservableResult,
  type Counter,
  type Histogram,
  type Meter,
  type MeterProvider,
  type Observable,
  type ObservableGauge,
} from '@opentelemetry/api';
import type { Queryable } from '../db/connect.ts';
import { ATTR, MESSAGING_SYSTEM } from './attributes.ts';

/**
 * Postbox's metrics, through @opentelemetry/api only (no MeterProvider registered: every instrument is a no-op
 * and no gauge query ever runs). They are recorded on the main thread, from what a relay cycle or a consume
 * task returns, because a piscina worker's meters would be a separate SDK that a single Prometheus endpoint
 * never sees. Attributes are bounded: topic, partition, consumer, outcome, error code — never an event id, key
 * or offset (docs/telemetry.md).
 *
 * The API has no proxy meter: a meter taken before the SDK is registered stays a no-op for ever. Instruments
 * are therefore made on first use per MeterProvider, so an SDK started after this module loaded is honoured.
 * Each domain (relay-metrics.ts, consumer-metrics.ts, …) defines its instruments here; metrics.ts loads them all.
 */
const SECONDS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900];
export const SYSTEM = { [ATTR.systemName]: MESSAGING_SYSTEM };

/** How a domain makes its instruments on a meter: histograms in seconds, integer counters, gauges. */
export interface InstrumentMaker {
  seconds(name: string, description: string): Histogram;
  count(name: string, description: string, unit: string): Counter;
  gauge(name: string, description: string, unit: string, valueType?: ValueType): ObservableGauge;
}

function maker(meter: Meter): InstrumentMaker {
  return {
    seconds: (name, description) =>
      meter.createHistogram(name, { description, unit: 's', advice: { explicitBucketBoundaries: SECONDS } }),
    count: (name, description, unit) => meter.createCounter(name, { description, unit, valueType: ValueType.INT }),
    gauge: (name, description, unit, valueType = ValueType.INT) =>
      meter.createObservableGauge(name, { description, unit, valueType }),
  };
}

/** A domain's instruments on the current meter; `off` when no MeterProvider is registered. */
export type Instruments<I> = I & { meter: Meter; off: boolean };

const builders: Array<(make: InstrumentMaker) => object> = [];
let current: { provider: MeterProvider; meter: Meter; off: boolean; sets: object[] } | null = null;
// With no MeterProvider the API hands out NoopMeters: recording skips even building attributes then.
const NoopMeter = createNoopMeter().constructor;

/**
 * Defines a domain's instruments; returns the accessor that hands them out for the current MeterProvider. Every
 * domain defined by then is built at once when the provider changes, as one set of instruments.
 */
export function defineInstruments<I extends object>(build: (make: InstrumentMaker) => I): () => Instruments<I> {
  const index = builders.push(build) - 1;
  return () => {
    const provider = metrics.getMeterProvider();
    if (current?.provider !== provider) {
      const meter = provider.getMeter('@postbox/engine', '0.1.0');
      const on = { meter, off: meter instanceof NoopMeter };
      const make = maker(meter);
      current = { provider, ...on, sets: builders.map((b) => ({ ...b(make), ...on })) };
    }
    current.sets[index] ??= { ...build(maker(current.meter)), meter: current.meter, off: current.off };
    return current.sets[index] as Instruments<I>;
  };
}

/** Recording is called from the relay's and the consumer's loops: a metrics failure must never reach them. */
export function guard(record: () => void): void {
  try {
    record();
  } catch {
    // A broken MeterProvider loses a data point, not an event.
  }
}

/**
 * Gauges read from PostgreSQL at collection time (a Prometheus scrape), at most once per `cacheMs` however
 * often it scrapes, and never when no MeterProvider is registered. A failing read skips one collection; it
 * never reaches the loop that registered it.
 */
export class DatabaseGauges<T, I extends object> {
  readonly #sources = new Map<object, Queryable>();
  readonly #instruments: () => Instruments<I>;
  readonly #observables: (m: Instruments<I>) => Observable[];
  readonly #read: (sql: Queryable) => Promise<T>;
  readonly #observe: (value: T, result: BatchObservableResult, m: Instruments<I>) => void;
  #registered: {
    meter: Meter;
    observables: Observable[];
    callback: (r: BatchObservableResult) => Promise<void>;
  } | null = null;
  #cache: { at: number; value: T } | null = null;
  readonly #cacheMs: number;

  constructor(
    instruments: () => Instruments<I>,
    observables: (m: Instruments<I>) => Observable[],
    read: (sql: Queryable) => Promise<T>,
    observe: (value: T, result: BatchObservableResult, m: Instruments<I>) => void,
    cacheMs = 5000,
  ) {
    this.#instruments = instruments;
    this.#cacheMs = cacheMs;
    this.#observables = observables;
    this.#read = read;
    this.#observe = observe;
  }

  /** Registers a source; returns its idempotent removal. Several sources in one process observe once. */
  add(owner: object, sql: Queryable): () => void {
    this.#sources.set(owner, sql);
    const m = this.#instruments();
    if (!this.#registered || this.#registered.meter !== m.meter) {
      this.#unregister();
      const observables = this.#observables(m);
      const callback = async (result: BatchObservableResult) => {
        const value = await this.#value();
        if (value !== null) this.#observe(value, result, m);
      };
      m.meter.addBatchObservableCallback(callback, observables);
      this.#registered = { meter: m.meter, observables, callback };
    }
    return () => {
      this.#sources.delete(owner);
      if (this.#sources.size === 0) this.#unregister();
    };
  }

  async #value(): Promise<T | null> {
    if (this.#cache && Date.now() - this.#cache.at < this.#cacheMs) return this.#cache.value;
    const sql = this.#sources.values().next().value;
    if (!sql) return null;
    try {
      this.#cache = { at: Date.now(), value: await this.#read(sql) };
      return this.#cache.value;
    } catch {
      return this.#cache?.value ?? null;
    }
  }

  #unregister(): void {
    if (!this.#registered) return;
    this.#registered.meter.removeBatchObservableCallback(this.#registered.callback, this.#registered.observables);
    this.#registered = null;
    this.#cache = null;
  }
}
