import { newEventId } from '@postbox/engine';
import type { BenchOptions } from '../options.ts';
import { perSecond, progressBar } from '../support.ts';

/**
 * A raw client's publishing loop, the same for every broker: `events` keyed messages (a tenth as many aggregates
 * as events) with the relay's CloudEvents attributes, `batch` in flight at a time, each awaited for its confirm.
 * `send` maps the broker-neutral headers to its binding and publishes. Returns events/s.
 */
export async function publishInFlight(
  options: Pick<BenchOptions, 'events' | 'batch'>,
  label: string,
  send: (key: string, id: string, headers: Record<string, string>) => Promise<unknown>,
): Promise<number> {
  const aggregates = Math.max(1, Math.floor(options.events / 10));
  const bar = progressBar(`${label}, ${options.batch} in flight`, options.events);
  const started = performance.now();
  for (let sent = 0; sent < options.events; sent += options.batch) {
    const n = Math.min(options.batch, options.events - sent);
    await Promise.all(
      Array.from({ length: n }, (_, i) => {
        const key = `a-${(sent + i) % aggregates}`;
        const id = newEventId();
        return send(key, id, {
          specversion: '1.0',
          id,
          type: 'OrderPlaced',
          source: 'bench',
          subject: key,
          time: new Date().toISOString(),
          aggregateversion: '1',
          schemaversion: '1',
          datacontenttype: 'application/json',
        });
      }),
    );
    bar(sent + n);
  }
  return perSecond(options.events, (performance.now() - started) / 1000);
}
