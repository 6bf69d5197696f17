import { batchedInsertBaseline } from './baselines/batched-insert.ts';
import { claimMarkBaseline } from './baselines/claim-mark.ts';
import { inboxBaseline } from './baselines/inbox.ts';
import { kafkaConsumeBaseline } from './baselines/kafka-consume.ts';
import { kafkaProduceBaseline } from './baselines/kafka-produce.ts';
import { naiveRelayBaseline } from './baselines/naive-relay.ts';
import { natsRawBaseline } from './baselines/nats-raw.ts';
import { rabbitmqRawBaseline } from './baselines/rabbitmq-raw.ts';
import { producerBaseline } from './baselines/producer.ts';
import type { Step } from './context.ts';
import { SCENARIOS, type BenchOptions, type ScenarioName } from './options.ts';
import { pgTransactionalOutboxPeer } from './peers/pg-transactional-outbox.ts';
import { backlogScenario } from './scenarios/backlog.ts';
import { clientsScenario } from './scenarios/clients.ts';
import { consumerScenario } from './scenarios/consumer.ts';
import { drainScenario } from './scenarios/drain.ts';
import { e2eScenario } from './scenarios/e2e.ts';
import { latencyScenario } from './scenarios/latency.ts';
import { reconcileScenario } from './scenarios/reconcile.ts';
import { relayScenario } from './scenarios/relay.ts';
import { sagaScenario } from './scenarios/saga.ts';
import { retentionScenario } from './scenarios/retention.ts';
import { scaleScenario } from './scenarios/scale.ts';

/** Baselines and peers, in the order they run (each measured alone, before any scenario). */
const BASELINES = {
  producer: producerBaseline,
  batchedInsert: batchedInsertBaseline,
  claimMark: claimMarkBaseline,
  kafkaProduce: kafkaProduceBaseline,
  natsRaw: natsRawBaseline,
  rabbitmqRaw: rabbitmqRawBaseline,
  kafkaConsume: kafkaConsumeBaseline,
  inbox: inboxBaseline,
  naiveRelay: naiveRelayBaseline,
  pgTransactionalOutbox: pgTransactionalOutboxPeer,
} satisfies Record<string, Step>;
type BaselineName = keyof typeof BASELINES;

const SCENARIO_STEPS: Record<ScenarioName, Step> = {
  relay: relayScenario,
  consumer: consumerScenario,
  e2e: e2eScenario,
  drain: drainScenario,
  latency: latencyScenario,
  scale: scaleScenario,
  backlog: backlogScenario,
  saga: sagaScenario,
  reconcile: reconcileScenario,
  retention: retentionScenario,
  clients: clientsScenario,
};

/** What each scenario's ratios are taken against, and the scenarios it needs first. */
const NEEDS: Record<ScenarioName, { baselines: BaselineName[]; scenarios: ScenarioName[] }> = {
  relay: {
    baselines: ['claimMark', 'kafkaProduce', 'natsRaw', 'rabbitmqRaw', 'naiveRelay', 'pgTransactionalOutbox'],
    scenarios: [],
  },
  consumer: { baselines: ['kafkaConsume', 'inbox'], scenarios: [] },
  e2e: { baselines: ['producer'], scenarios: [] },
  drain: {
    baselines: ['claimMark', 'kafkaProduce', 'kafkaConsume', 'natsRaw', 'rabbitmqRaw', 'inbox'],
    scenarios: [],
  },
  latency: { baselines: ['producer'], scenarios: ['e2e'] },
  scale: { baselines: [], scenarios: [] },
  backlog: { baselines: [], scenarios: [] },
  saga: { baselines: ['producer'], scenarios: ['e2e'] },
  reconcile: { baselines: [], scenarios: [] },
  retention: { baselines: [], scenarios: [] },
  clients: { baselines: [], scenarios: [] },
};

export interface PlannedStep {
  kind: 'baseline' | 'scenario';
  name: string;
  run: Step;
}

/** The steps of a run: the baselines its scenarios need (all of them for `all`), then the scenarios. */
export function plan(options: BenchOptions): PlannedStep[] {
  const scenarios = new Set<ScenarioName>();
  const add = (s: ScenarioName) => {
    for (const dep of NEEDS[s].scenarios) add(dep);
    scenarios.add(s);
  };
  options.scenarios.forEach(add);
  const baselines = new Set<BaselineName>(
    options.scenario === 'all'
      ? (Object.keys(BASELINES) as BaselineName[])
      : [...scenarios].flatMap((s) => NEEDS[s].baselines),
  );
  return [
    ...(Object.keys(BASELINES) as BaselineName[])
      .filter((b) => baselines.has(b))
      .map((name) => ({ kind: 'baseline' as const, name, run: BASELINES[name] })),
    ...SCENARIOS.filter((s) => scenarios.has(s)).map((name) => ({
      kind: 'scenario' as const,
      name,
      run: SCENARIO_STEPS[name],
    })),
  ];
}
