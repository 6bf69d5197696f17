// The main thread's heap bound for the long-running roles. V8 sizes a heap from the machine's memory and collects
// lazily up to there, so an unbounded busy relay or consumer holds hundreds of MiB of garbage (docs/operations.md,
// *Memory*); V8 takes the bound only at process start, so the `postbox` command restarts itself with it, in place.
// Imports nothing of the engine: this runs before the process image that does the work is started.

/** The roles that run for days and are started once per process: `postbox relay`, `postbox consume`. */
const ROLES = new Set(['relay', 'consume']);

/** Old-generation MiB of a role's main thread. @defaultValue 256 */
export const DEFAULT_HEAP_MB = 256;

/** Young-generation semi-space MiB: V8's default grows it to 16–64, each MiB of it resident. */
const SEMI_SPACE_MB = 8;

const HEAP_FLAGS = /--max-old-space-size|--max-semi-space-size|--max-heap-size/;

/**
 * The V8 flags `command` should start with, or null when none: not a role, `POSTBOX_HEAP_MB=0`, or the operator
 * already chose heap flags (in NODE_OPTIONS or on node's command line), which always win.
 * Throws (code config_invalid, as ConfigError) on a `POSTBOX_HEAP_MB` that is not a whole number of MiB (0, or at
 * least 64).
 */
export function roleHeapFlags(
  command: string | undefined,
  env: NodeJS.ProcessEnv,
  execArgv: string[],
): string[] | null {
  if (!command || !ROLES.has(command)) return null;
  if (HEAP_FLAGS.test(env.NODE_OPTIONS ?? '') || execArgv.some((a) => HEAP_FLAGS.test(a))) return null;
  const raw = env.POSTBOX_HEAP_MB;
  const mb = raw === undefined || raw === '' ? DEFAULT_HEAP_MB : Number(raw);
  if (!Number.isInteger(mb) || (mb !== 0 && mb < 64)) {
    const message = `POSTBOX_HEAP_MB must be 0 (V8's default heap) or a whole number of MiB ≥ 64, got "${raw}"`;
    throw Object.assign(new Error(message), { code: 'config_invalid' });
  }
  if (mb === 0) return null;
  return [`--max-old-space-size=${mb}`, `--max-semi-space-size=${SEMI_SPACE_MB}`];
}

/**
 * Replaces this process with itself started with the role's heap flags (same pid, arguments, environment and
 * stdio: a supervisor sees one process). Returns when there is nothing to do or the platform cannot (no execve).
 */
export function restartWithRoleHeap(argv: string[]): void {
  const flags = roleHeapFlags(argv[0], process.env, process.execArgv);
  if (!flags || typeof process.execve !== 'function' || process.platform === 'win32') return;
  const script = process.argv[1]!;
  process.execve(process.execPath, [process.execPath, ...flags, ...process.execArgv, script, ...argv], process.env);
}
