import type { Bench } from '../context.ts';
import { rate } from '../report.ts';
import { benchDatabase, perSecond, progressBar, timed } from '../support.ts';
import { rawOrderWriter } from '../workload/business.ts';
import { startCpuMeter } from '../workload/cpu.ts';

const CONNECTIONS = [1, 8, 32, 64];

/**
 * The raw producer: the business transaction (order row + outbox row, one transaction per event, by hand) with
 * nothing else running, at 1, 8, 32 and 64 connections for one window each. Its best rate bounds e2e. The
 * machine's CPU per event beside it says what the business write itself costs of the two cores, before any
 * relay or consumer runs.
 */
export async function producerBaseline({ options, report }: Bench): Promise<void> {
  const db = await benchDatabase(64);
  try {
    const byConnections: Record<string, number> = {};
    const machineCpuByConnections: Record<string, number> = {};
    let n = 0;
    for (const connections of CONNECTIONS) {
      const writer = rawOrderWriter(db.sql, {
        topic: 'bench.unused',
        payload: options.payload,
        prefix: `raw${connections}`,
      });
      const cpu = startCpuMeter({ producer: true });
      const run = await timed(
        connections,
        options.windowMs,
        async () => (await writer.place(n++), 1),
        progressBar(`raw producer, ${connections} connections`, options.windowMs),
      );
      byConnections[connections] = perSecond(run.done, run.seconds);
      machineCpuByConnections[connections] = cpu.perEvent(run.done).machine;
    }
    const [bestConnections, best] = Object.entries(byConnections).sort((a, b) => b[1] - a[1])[0]!;
    report.results.baselines.producer = {
      eventsPerSecond: best,
      bestConnections: Number(bestConnections),
      byConnections,
      machineCpuMicrosecondsPerEvent: machineCpuByConnections,
      windowMs: options.windowMs,
    };
    for (const c of CONNECTIONS) {
      report.row(
        'baseline',
        `raw producer, ${c} connection${c > 1 ? 's' : ''}`,
        rate(byConnections[c]!),
        [],
        `${c === Number(bestConnections) ? 'best: bounds e2e' : 'order row + outbox row per transaction'}; machine CPU ${Math.round(machineCpuByConnections[c]!).toLocaleString('en-US')} µs per event`,
      );
    }
  } finally {
    await db.drop();
  }
}
