// @postbox/engine/kafka-platformatic: the Kafka publisher over @platformatic/kafka (the relay's
// POSTBOX_KAFKA_PUBLISHER=platformatic), apart from @postbox/engine/kafka so that only a process using it loads it.
export { PlatformaticKafkaPublisher } from './adapters/kafka/platformatic-publisher.ts';
export { classifyPlatformaticError } from './adapters/kafka/platformatic-classify.ts';
