import type { AMQPMessage } from '@cloudamqp/amqp-client';
import type { InboundRecord } from '../../ports/subscriber.ts';
import { fromAmqpHeaders, KEY_HEADER } from './headers.ts';

/** An AMQP delivery as Postbox reads it: the offset is the subscriber's count, the key out of its header. */
export function toInboundRecord(topic: string, partition: number, offset: bigint, m: AMQPMessage): InboundRecord {
  const headers = fromAmqpHeaders(m.properties.headers, m.properties.contentType);
  const key = headers[KEY_HEADER] ?? null;
  delete headers[KEY_HEADER];
  const value = m.body === null ? null : Buffer.from(m.body.buffer, m.body.byteOffset, m.body.byteLength);
  return { topic, partition, offset: offset.toString(), key, value, headers };
}
