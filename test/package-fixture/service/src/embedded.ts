// The relay and the consumer inside the service's own process, configured from the same variables as the CLI.
import { linkEnv, readConfig } from '@postbox/api';
import { startConsumer, startRelay } from '@postbox/workers';
import projection from './projection.consumer.js';

const config = readConfig(await linkEnv());
const relay = await startRelay({
  databaseUrl: config.databaseUrl,
  broker: config.broker,
  topics: config.topics,
  relay: config.relay,
  threads: 1,
});
const consumer = await startConsumer(projection, {
  databaseUrl: config.databaseUrl,
  broker: config.broker,
  redisUrl: config.redisUrl,
});
console.log('embedded relay and consumer running');
process.once('SIGTERM', () => {
  Promise.all([consumer.stop(), relay?.stop()]).then(
    () => console.log('embedded relay and consumer stopped'),
    (err: unknown) => {
      console.error(err);
      process.exitCode = 1;
    },
  );
});
