// @postbox/engine/rabbitmq, for entry files that wire RabbitMQ: publisher, topology, the header binding.
export { RabbitPublisher, type RabbitPublisherOptions } from './adapters/rabbitmq/publisher.ts';
export { ensureExchanges, ensureGroupQueues, queueName, type RabbitTopicSpec } from './adapters/rabbitmq/topology.ts';
export { fromAmqpHeaders, toAmqpHeaders } from './adapters/rabbitmq/headers.ts';
export { KEY_HEADER as RABBIT_KEY_HEADER } from './adapters/rabbitmq/headers.ts';
export { RabbitSubscriber, type RabbitSubscriberOptions } from './adapters/rabbitmq/subscriber.ts';
export { RabbitOffsets, type RabbitOffsetsOptions } from './adapters/rabbitmq/offsets.ts';
export { RabbitTopicReader } from './adapters/rabbitmq/topic-reader.ts';
export { connectRabbit, closeConnection as closeRabbit } from './adapters/rabbitmq/connection.ts';
