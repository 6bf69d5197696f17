// @postbox/engine/nats, for entry files that wire NATS JetStream: publisher, subscriber, topic reader, offsets,
// streams, the header binding.
export { connectNats, parseNatsServers, type NatsConnectionOptions } from './adapters/nats/client.ts';
export {
  ensureStreams,
  streamName,
  subjectOf,
  type NatsStreamOptions,
  type StreamTopicSpec,
} from './adapters/nats/streams.ts';
export { NatsPublisher, type NatsPublisherOptions } from './adapters/nats/publisher.ts';
export { NatsSubscriber, type NatsSubscriberOptions } from './adapters/nats/subscriber.ts';
export { NatsOffsets } from './adapters/nats/offsets.ts';
export { NatsTopicReader, type NatsTopicReaderOptions } from './adapters/nats/topic-reader.ts';
export { durableName } from './adapters/nats/consumers.ts';
export { fromNatsHeaders, KEY_HEADER, toNatsHeaders } from './adapters/nats/headers.ts';
export { partitionForKey } from './envelope/key-partition.ts';
