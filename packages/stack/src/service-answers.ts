import { kafkaAnswers } from './kafka.ts';
import { natsAnswers } from './nats.ts';
import { postgresAnswers } from './postgres.ts';
import { rabbitmqAnswers } from './rabbitmq.ts';
import { redisAnswers } from './redis.ts';
import type { LocalService } from './service.ts';

/** Resolves once the service at `target` answers as its kind of server does (a query, a PING, a metadata call). */
export function answers(service: LocalService, target: string): Promise<void> {
  switch (service.name) {
    case 'postgres':
      return postgresAnswers(target);
    case 'redis':
      return redisAnswers(target);
    case 'kafka':
      return kafkaAnswers(
        target
          .split(',')
          .map((b) => b.trim())
          .filter(Boolean),
      );
    case 'nats':
      return natsAnswers(target);
    case 'rabbitmq':
      return rabbitmqAnswers(target);
  }
}
