import { isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ConfigError, type Sql } from '@postbox/engine';
import { SagaOrchestrator, type SagaDefinition } from '@postbox/engine/saga';

const VARIABLE = 'POSTBOX_SAGA_MODULES';

/**
 * The saga definitions named by POSTBOX_SAGA_MODULES, for a process that acts on sagas without running them (the
 * control plane, `postbox sagas`): each module exports an array `sagas` (or a default array) of `defineSaga`
 * results. A path (starting with `.` or `/`, or ending in .ts/.js/.mjs) is resolved from `cwd`; anything else is
 * imported as a package specifier. Throws ConfigError naming the variable and the module.
 */
export async function loadSagaDefinitions(
  specifiers: readonly string[],
  cwd = process.cwd(),
): Promise<SagaDefinition<any>[]> {
  const all: SagaDefinition<any>[] = [];
  for (const spec of specifiers) {
    let mod: Record<string, unknown>;
    try {
      mod = (await import(moduleUrl(spec, cwd))) as Record<string, unknown>;
    } catch (cause) {
      throw new ConfigError(`${VARIABLE}: cannot load ${spec}: ${(cause as Error)?.message ?? String(cause)}`, {
        cause,
      });
    }
    const list = mod.sagas ?? mod.default;
    if (!Array.isArray(list) || list.length === 0) {
      throw new ConfigError(
        `${VARIABLE}: ${spec} exports no saga definitions: export an array \`sagas\` (or a default array) of defineSaga(…) results`,
      );
    }
    list.forEach((d: unknown, i) => {
      if (!isDefinition(d)) {
        throw new ConfigError(
          `${VARIABLE}: ${spec}: sagas[${i}] is not a saga definition (pass it through defineSaga from @postbox/engine/saga)`,
        );
      }
      all.push(d);
    });
  }
  return all;
}

/** An orchestrator over the modules' definitions, or undefined when none are named. */
export async function loadSagaOrchestrator(
  specifiers: readonly string[],
  cwd = process.cwd(),
): Promise<SagaOrchestrator | undefined> {
  if (specifiers.length === 0) return undefined;
  const definitions = await loadSagaDefinitions(specifiers, cwd);
  try {
    return new SagaOrchestrator(definitions);
  } catch (cause) {
    throw new ConfigError(`${VARIABLE}: ${(cause as Error).message}`, { cause });
  }
}

/**
 * The check every process that moves sagas makes (SagaOrchestrator.register): a definition whose shape changed
 * without a new version, or a version unfinished sagas need that is not loaded, is refused — an operator's
 * action must build the commands the instance was started with.
 */
export async function registerSagaDefinitions(sql: Sql, orchestrator: SagaOrchestrator): Promise<void> {
  try {
    await orchestrator.register(sql);
  } catch (cause) {
    if (!(cause instanceof ConfigError)) throw cause;
    throw new ConfigError(`${VARIABLE}: ${cause.message}`, { cause });
  }
}

/** "order-fulfilment v1, payment v2", for a start line. */
export function describeDefinitions(orchestrator: SagaOrchestrator): string {
  return orchestrator
    .definitions()
    .map((d) => `${d.type} v${d.version}`)
    .join(', ');
}

function moduleUrl(spec: string, cwd: string): string {
  const isPath = spec.startsWith('.') || isAbsolute(spec) || /\.(?:[cm]?[jt]s)$/.test(spec);
  return isPath ? pathToFileURL(resolve(cwd, spec)).href : spec;
}

function isDefinition(d: unknown): d is SagaDefinition<any> {
  if (typeof d !== 'object' || d === null) return false;
  const x = d as Partial<SagaDefinition>;
  return (
    typeof x.type === 'string' &&
    Number.isInteger(x.version) &&
    Array.isArray(x.steps) &&
    typeof x.shapeHash === 'string' &&
    typeof x.replyTopic === 'string'
  );
}
