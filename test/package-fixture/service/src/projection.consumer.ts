// `postbox consume dist/projection.consumer.js`: the service's consumer, its handler in a worker thread.
import { defineConsumer } from '@postbox/engine';

export default defineConsumer({
  name: 'shop-projection',
  topics: [process.env.SHOP_TOPIC!],
  handler: new URL('./projection.handler.js', import.meta.url),
  limits: { threads: 1 },
});
