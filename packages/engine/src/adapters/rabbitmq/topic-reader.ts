import type { LogBounds, TopicReader } from '../../ports/topic-reader.ts';

/**
 * The verifier's view of a RabbitMQ "log": there is none. RabbitMQ keeps messages only in queues, until a consumer
 * acknowledges them, and reading a queue takes from it; so the verifier reads no records here and its checks
 * are PostgreSQL's side: the outbox all published, each consumer's inbox, effects, failures and sagas (the
 * log-level checks — lost writes, positions, reordering in the log — need a log; docs/brokers.md).
 */
export class RabbitTopicReader implements TopicReader {
  async read(): Promise<LogBounds[]> {
    return [];
  }

  async close(): Promise<void> {}
}
