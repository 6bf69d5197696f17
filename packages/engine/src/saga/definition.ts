import { createHash } from 'node:crypto';
import { ConfigError } from '../errors.ts';

/** A command a saga sends to a participant: an event type and its data. */
export interface SagaCommand {
  type: string;
  data: unknown;
}

/** How a step's command, and its compensation and query, are made from the saga's data. */
export interface StepInput<D> {
  name: string;
  /** The topic the participant consumes its commands from. */
  topic: string;
  command: (data: D) => SagaCommand;
  /** Reply event types that mean the step was applied. */
  success: readonly string[];
  /** Reply event types that mean a business refusal (nothing applied; the saga compensates what went before). */
  failure: readonly string[];
  /** Folds a success reply's data into the saga's data (ids the later steps need). @defaultValue data unchanged */
  onSuccess?: (data: D, reply: unknown) => D;
  /** The new business action that undoes the step. Steps without one have nothing to undo. */
  compensate?: (data: D) => SagaCommand;
  /**
   * Asks the participant whether the step was applied, when its reply did not come (a lost reply must not cause a
   * wrong reverse action). @defaultValue `{ type: 'postbox.saga.inspect', data: {} }`, answered by `participant()`
   */
  query?: (data: D) => SagaCommand;
  /** A reply not here by then counts as unknown: the saga asks. @defaultValue 30000 */
  timeoutMs?: number;
  /**
   * Sends of the step's query, or of its compensation, before the saga needs attention (a forward command is sent
   * once: an unanswered one is asked about, never sent blind again). @defaultValue 5
   */
  maxAttempts?: number;
  /** After this step succeeds the saga is forward-only: it never compensates. At most one step is the pivot. */
  pivot?: boolean;
}

export interface SagaInput<D> {
  /** Names the flow; with the version it selects the definition a saga instance runs. */
  type: string;
  /** An instance keeps the version it started with; change it whenever the steps change. */
  version: number;
  steps: ReadonlyArray<StepInput<D>>;
  /** A saga not finished by then compensates (before its pivot) or needs attention (after). */
  deadlineMs?: number;
  /** Where participants send their replies. @defaultValue `postbox.saga.<type>.replies` */
  replyTopic?: string;
}

export interface SagaStep<D> extends Required<Omit<StepInput<D>, 'onSuccess' | 'compensate'>> {
  index: number;
  onSuccess: (data: D, reply: unknown) => D;
  compensate: ((data: D) => SagaCommand) | null;
}

/** A resolved, validated saga definition. */
export interface SagaDefinition<D = unknown> {
  type: string;
  version: number;
  steps: ReadonlyArray<SagaStep<D>>;
  deadlineMs: number | null;
  replyTopic: string;
  /** Index of the pivot step, or -1. */
  pivot: number;
  /**
   * A hash of the definition's shape (steps, topics, reply types, pivot, which steps compensate or query): a
   * process refuses to run a definition whose shape changed without a new version.
   */
  shapeHash: string;
}

export const INSPECT_COMMAND = 'postbox.saga.inspect';
const NAME = /^[A-Za-z][A-Za-z0-9_.-]{0,99}$/;

/** Validates a saga definition once, with messages that say what to fix; defaults are resolved here only. */
export function defineSaga<D>(input: SagaInput<D>): SagaDefinition<D> {
  const where = `saga ${JSON.stringify(input.type)}`;
  if (!NAME.test(input.type)) throw new ConfigError(`${where}: type must match ${NAME}`);
  if (!Number.isInteger(input.version) || input.version < 1)
    throw new ConfigError(`${where}: version must be an integer ≥ 1`);
  if (input.steps.length === 0) throw new ConfigError(`${where}: needs at least one step`);
  const names = new Set<string>();
  const customQuery = new Set(input.steps.filter((s) => s.query !== undefined).map((s) => s.name));
  const steps = input.steps.map((s, index): SagaStep<D> => {
    const at = `${where} step ${JSON.stringify(s.name)}`;
    if (!NAME.test(s.name)) throw new ConfigError(`${at}: name must match ${NAME}`);
    if (names.has(s.name)) throw new ConfigError(`${at}: step names must be unique`);
    names.add(s.name);
    if (!s.topic) throw new ConfigError(`${at}: topic is required`);
    if (s.success.length === 0) throw new ConfigError(`${at}: name at least one success reply type`);
    const reserved = [...s.success, ...s.failure].find((t) => t.startsWith('postbox.saga.'));
    if (reserved) throw new ConfigError(`${at}: reply type ${reserved} is reserved for Postbox's own saga replies`);
    const overlap = s.success.find((t) => s.failure.includes(t));
    if (overlap) throw new ConfigError(`${at}: reply type ${overlap} cannot mean both success and failure`);
    if (s.pivot && s.compensate) throw new ConfigError(`${at}: the pivot step is forward-only and has no compensation`);
    const timeoutMs = s.timeoutMs ?? 30_000;
    const maxAttempts = s.maxAttempts ?? 5;
    if (!Number.isInteger(timeoutMs) || timeoutMs < 100)
      throw new ConfigError(`${at}: timeoutMs must be an integer ≥ 100`);
    if (!Number.isInteger(maxAttempts) || maxAttempts < 1)
      throw new ConfigError(`${at}: maxAttempts must be an integer ≥ 1`);
    return {
      index,
      name: s.name,
      topic: s.topic,
      command: s.command,
      success: [...s.success],
      failure: [...s.failure],
      onSuccess: s.onSuccess ?? ((data) => data),
      compensate: s.compensate ?? null,
      query: s.query ?? (() => ({ type: INSPECT_COMMAND, data: {} })),
      timeoutMs,
      maxAttempts,
      pivot: s.pivot === true,
    };
  });
  const pivots = steps.filter((s) => s.pivot);
  if (pivots.length > 1)
    throw new ConfigError(`${where}: at most one pivot step (${pivots.map((s) => s.name).join(', ')})`);
  const pivot = pivots[0]?.index ?? -1;
  for (const s of steps) {
    if (pivot >= 0 && s.index > pivot && s.compensate) {
      throw new ConfigError(
        `${where} step ${JSON.stringify(s.name)}: steps after the pivot are forward-only, no compensation`,
      );
    }
  }
  const deadlineMs = input.deadlineMs ?? null;
  if (deadlineMs !== null && (!Number.isInteger(deadlineMs) || deadlineMs < 1000)) {
    throw new ConfigError(`${where}: deadlineMs must be an integer ≥ 1000`);
  }
  const replyTopic = input.replyTopic ?? `postbox.saga.${input.type}.replies`;
  const shape = steps.map((s) => [
    s.name,
    s.topic,
    s.success,
    s.failure,
    s.pivot,
    s.compensate !== null,
    customQuery.has(s.name),
  ]);
  const shapeHash = createHash('sha256')
    .update(JSON.stringify([input.type, replyTopic, shape]))
    .digest('hex')
    .slice(0, 16);
  return { type: input.type, version: input.version, steps, deadlineMs, replyTopic, pivot, shapeHash };
}
