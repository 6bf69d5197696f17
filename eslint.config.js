// ESLint runs the rules a formatter cannot: promises nobody awaits, and the broker boundary (docs/design.md §3).
import tseslint from 'typescript-eslint';

const BROKER_SDKS = [
  'kafkajs',
  '@platformatic/kafka',
  '@nats-io/jetstream',
  '@nats-io/transport-node',
  '@cloudamqp/amqp-client',
  'bullmq',
  'ioredis',
].map((name) => ({
  name,
  message: `only packages/engine/src/adapters/ may import ${name}; use the ports (ports/) and the adapters' entries`,
}));

export default tseslint.config(
  { ignores: ['**/node_modules/**', '**/dist/**', '.postbox/**'] },
  {
    files: ['packages/*/src/**/*.ts', 'test/src/**/*.ts', 'bench/src/**/*.ts', 'scripts/**/*.ts'],
    languageOptions: {
      parser: tseslint.parser,
      parserOptions: {
        projectService: { allowDefaultProject: ['scripts/*.ts', 'scripts/release/*.ts'] },
        tsconfigRootDir: import.meta.dirname,
      },
    },
    plugins: { '@typescript-eslint': tseslint.plugin },
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    rules: {
      // The loops start work with `void promise` on purpose; anything else left floating is a lost error.
      '@typescript-eslint/no-floating-promises': [
        'error',
        // node:test's test() returns a promise the runner itself awaits.
        {
          allowForKnownSafeCalls: [
            { from: 'package', package: 'node:test', name: ['test', 'it', 'describe', 'suite'] },
          ],
        },
      ],
    },
  },
  {
    // The product's runtime code speaks ports; the broker and scheduler SDKs stay inside the adapters. Tests,
    // benchmarks and the local stack manager talk to the brokers directly on purpose.
    files: ['packages/engine/src/**/*.ts', 'packages/api/src/**/*.ts', 'packages/workers/src/**/*.ts'],
    ignores: [
      'packages/engine/src/adapters/**',
      'packages/engine/src/kafka.ts',
      'packages/engine/src/kafka-platformatic.ts',
      'packages/engine/src/nats.ts',
      '**/*.test.ts',
    ],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths: BROKER_SDKS,
          // Nor a broker adapter's modules: the core knows no broker (an adapter maps its own errors, headers and
          // positions); only an adapter's entry (src/kafka.ts, src/nats.ts) opens it.
          patterns: [
            {
              group: ['**/adapters/kafka/*'],
              message:
                'only the adapter itself and its entries (src/kafka.ts, src/kafka-platformatic.ts) may import adapters/kafka/',
            },
            {
              group: ['**/adapters/nats/*'],
              message: 'only the adapter itself and its entry (src/nats.ts) may import adapters/nats/',
            },
          ],
        },
      ],
      // Nor a binding's header names: the core reads broker-neutral headers (envelope/headers.ts).
      'no-restricted-syntax': [
        'error',
        {
          selector: 'Literal[value=/^ce_/], TemplateElement[value.raw=/^ce_/], Identifier[name=/^ce_/]',
          message:
            "a binding's header name (ce_…) outside a broker adapter: read the neutral name (envelope/headers.ts)",
        },
      ],
    },
  },
  {
    // The one reader of headers stored before they were neutral.
    files: ['packages/engine/src/envelope/headers.ts'],
    rules: { 'no-restricted-syntax': 'off' },
  },
);
