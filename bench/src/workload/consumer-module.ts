// A consumer definition for `postbox consume <this file>` in the scale and backlog scenarios. It is an entry
// module of a spawned process, so it reads its name, topic and limits from the environment the bench gives it.
import { defineConsumer } from '@postbox/engine';

const env = process.env;
if (!env.BENCH_CONSUMER || !env.BENCH_TOPIC)
  throw new Error('consumer-module.ts needs BENCH_CONSUMER and BENCH_TOPIC in the environment');

export default defineConsumer({
  name: env.BENCH_CONSUMER,
  topics: [env.BENCH_TOPIC],
  handler: new URL('./projection-handler.ts', import.meta.url),
  limits: { threads: Number(env.BENCH_CONSUMER_THREADS ?? 2) },
});
