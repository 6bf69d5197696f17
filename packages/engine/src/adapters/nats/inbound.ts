import type { JsMsg } from '@nats-io/jetstream';
import type { InboundRecord } from '../../ports/subscriber.ts';
import { fromNatsHeaders, KEY_HEADER } from './headers.ts';

/** A JetStream message as Postbox reads it: offset = stream sequence, the key out of `ce-partitionkey`. */
export function toInboundRecord(topic: string, partition: number, m: JsMsg): InboundRecord {
  const headers = fromNatsHeaders(m.headers);
  const key = headers[KEY_HEADER] ?? null;
  delete headers[KEY_HEADER];
  return { topic, partition, offset: String(m.seq), key, value: Buffer.from(m.data), headers };
}
