import type { BatchObservableResult, Meter, Observable } from '@opentelemetry/api';
import type { BrokerHealthReport } from '../ports/broker-health.ts';
import { ATTR } from './attributes.ts';
import { defineInstruments, type Instruments } from './instruments.ts';

/** The broker side (seed §17): its copies of Postbox's topics, and whether its nodes answer. */
const instruments = defineInstruments((make) => ({
  up: make.gauge('postbox.broker.up', 'The last broker health probe got an answer (1) or not (0)', '1'),
  nodesUnreachable: make.gauge(
    'postbox.broker.nodes.unreachable',
    'Nodes (listed, or holding replicas but fenced) that did not answer a connection of their own',
    '{node}',
  ),
  underReplicated: make.gauge(
    'postbox.broker.partitions.under_replicated',
    'Partitions with fewer in-sync replicas (on nodes that answer) than replicas',
    '{partition}',
  ),
  offline: make.gauge(
    'postbox.broker.partitions.offline',
    'Partitions without a leader that answers: neither readable nor writable',
    '{partition}',
  ),
  belowMinInsync: make.gauge(
    'postbox.broker.partitions.below_min_insync',
    'Partitions with fewer in-sync replicas than min.insync.replicas: acks=all publishing to them stalls',
    '{partition}',
  ),
  minIsr: make.gauge(
    'postbox.broker.isr.min',
    "The smallest in-sync replica count among a topic's partitions",
    '{replica}',
  ),
  minInsync: make.gauge(
    'postbox.broker.min_insync_replicas',
    "The topic's min.insync.replicas (-1: the broker did not say)",
    '{replica}',
  ),
}));

type M = Instruments<ReturnType<typeof instruments>>;
const observables = (m: M): Observable[] => [
  m.up,
  m.nodesUnreachable,
  m.underReplicated,
  m.offline,
  m.belowMinInsync,
  m.minIsr,
  m.minInsync,
];

const sources = new Map<object, () => BrokerHealthReport | null>();
let registered: { meter: Meter; observables: Observable[]; callback: (r: BatchObservableResult) => void } | null = null;

/**
 * Observes the latest report of each source at collection time (no broker call on a scrape: the sampler that
 * owns the report probes on its own schedule). A failed probe reports `up` 0 and no topic series, so a stale
 * "healthy" value is never exported for a cluster that stopped answering.
 */
function observe(result: BatchObservableResult, m: M): void {
  for (const latest of sources.values()) {
    const report = latest();
    if (!report) continue;
    result.observe(m.up, report.ok ? 1 : 0);
    if (!report.ok) continue;
    result.observe(m.nodesUnreachable, report.brokers.filter((b) => !b.reachable).length);
    for (const t of report.topics) {
      if (t.error !== null) continue;
      const topic = { [ATTR.destinationName]: t.topic };
      result.observe(m.underReplicated, t.underReplicated, topic);
      result.observe(m.offline, t.offline, topic);
      result.observe(m.belowMinInsync, t.belowMinInsync, topic);
      result.observe(m.minIsr, t.minIsr, topic);
      result.observe(m.minInsync, t.minInsyncReplicas ?? -1, topic);
    }
  }
}

/**
 * The broker health gauges, while a sampler lives in this process (the control plane's BrokerHealthMonitor).
 * Returns the idempotent removal. A throwing source loses one collection, never the sampler.
 */
export function observeBrokerHealth(owner: object, latest: () => BrokerHealthReport | null): () => void {
  sources.set(owner, latest);
  const m = instruments();
  if (!registered || registered.meter !== m.meter) {
    unregister();
    const list = observables(m);
    const callback = (result: BatchObservableResult) => {
      try {
        observe(result, m);
      } catch {
        // A broken report loses a data point, not the sampler.
      }
    };
    m.meter.addBatchObservableCallback(callback, list);
    registered = { meter: m.meter, observables: list, callback };
  }
  return () => {
    sources.delete(owner);
    if (sources.size === 0) unregister();
  };
}

function unregister(): void {
  if (!registered) return;
  registered.meter.removeBatchObservableCallback(registered.callback, registered.observables);
  registered = null;
}
