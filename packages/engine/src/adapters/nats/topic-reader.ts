import { DeliverPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { BrokerError } from '../../errors.ts';
import type { InboundRecord } from '../../ports/subscriber.ts';
import type { LogBounds, TopicReader } from '../../ports/topic-reader.ts';
import { connectNats, type NatsConnectionOptions } from './client.ts';
import { classifyNatsError } from './classify.ts';
import { toInboundRecord } from './inbound.ts';
import { partitionStreams } from './streams.ts';

export interface NatsTopicReaderOptions extends NatsConnectionOptions {
  /** How long reading may take before it fails. @defaultValue 120000 */
  timeoutMs?: number;
}

/**
 * TopicReader over JetStream ordered consumers (ephemeral, unacknowledged, recreated by nats.js at the right
 * sequence on a gap), one partition stream at a time, so no group's durable is touched. The bounds of each
 * stream are taken before it is read: low = its first sequence, high = its last + 1.
 */
export class NatsTopicReader implements TopicReader {
  readonly #options: NatsTopicReaderOptions;

  constructor(options: NatsTopicReaderOptions) {
    this.#options = options;
  }

  async read(topics: string[], onRecord: (record: InboundRecord) => void): Promise<LogBounds[]> {
    const nc = await connectNats({ ...this.#options, name: this.#options.name ?? 'postbox-verify' }).catch((cause) => {
      throw classifyNatsError(cause);
    });
    const deadline = Date.now() + (this.#options.timeoutMs ?? 120_000);
    const bounds: LogBounds[] = [];
    try {
      const jsm = await jetstreamManager(nc);
      const js = jetstream(nc);
      for (const topic of topics) {
        for (const { name, partition } of await partitionStreams(jsm, topic)) {
          const { state } = await jsm.streams.info(name);
          bounds.push({ topic, partition, low: String(state.first_seq), high: String(state.last_seq + 1) });
          if (state.messages === 0) continue;
          const reader = await js.consumers.get(name, { deliver_policy: DeliverPolicy.All });
          const messages = await reader.consume({ max_messages: 500 });
          const timer = setTimeout(() => messages.stop(), Math.max(0, deadline - Date.now()));
          let last = 0;
          try {
            for await (const m of messages) {
              onRecord(toInboundRecord(topic, partition, m));
              last = m.seq;
              if (m.seq >= state.last_seq) break;
            }
          } finally {
            clearTimeout(timer);
            messages.stop();
          }
          if (last < state.last_seq)
            throw new BrokerError(
              'verify_read_timeout',
              'transient',
              `stream ${name} was not read to its end (${state.last_seq}) in time: at ${last}`,
            );
        }
      }
      return bounds;
    } catch (cause) {
      throw cause instanceof BrokerError ? cause : classifyNatsError(cause);
    } finally {
      await nc.close().catch(() => {});
    }
  }

  async close(): Promise<void> {}
}
