// @postbox/engine/kafka, for entry files that wire Kafka: publisher, subscriber, offsets, topic reader, topics.
export { createKafka, parseBrokers, type KafkaConnection } from './adapters/kafka/client.ts';
export { ensureTopics, type TopicSpec } from './adapters/kafka/topics.ts';
export { KafkaPublisher } from './adapters/kafka/publisher.ts';
export { KafkaSubscriber, type KafkaSubscriberOptions, type SubscriberCrash } from './adapters/kafka/subscriber.ts';
export { KafkaOffsets } from './adapters/kafka/offsets.ts';
export { KafkaTopicReader } from './adapters/kafka/topic-reader.ts';
export { fromKafkaHeaders, toKafkaHeaders } from './adapters/kafka/headers.ts';
export { toRecord } from './relay/record.ts';
export { syncKafkaAcls, type KafkaAclSync } from './adapters/kafka/acls.ts';
