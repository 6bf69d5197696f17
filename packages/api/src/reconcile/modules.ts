import { isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ConfigError } from '@postbox/engine';
import type { ParticipantRecords, ReconcileSource } from '@postbox/engine/reconcile';

const VARIABLE = 'POSTBOX_RECONCILE_MODULES';

export interface ReconcileRegistrations {
  sources: ReconcileSource[];
  participants: ParticipantRecords[];
}

/** "./reconcile/orders.ts,@acme/reconcile": module paths (relative to the working directory) or package specifiers. */
export function parseReconcileModules(value: string): string[] {
  return value
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
}

/**
 * The registrations named by POSTBOX_RECONCILE_MODULES: each module exports `sources` (defineReconcileSource
 * results) and may export `participants` (defineParticipantRecords results). A path (starting with `.` or `/`, or
 * ending in .ts/.js/.mjs, with an optional `?query` the module reads) is resolved from `cwd`; anything else is
 * imported as a package specifier. Throws ConfigError naming the variable and the module.
 */
export async function loadReconcileModules(
  specifiers: readonly string[],
  cwd = process.cwd(),
): Promise<ReconcileRegistrations> {
  const out: ReconcileRegistrations = { sources: [], participants: [] };
  for (const spec of specifiers) {
    let mod: Record<string, unknown>;
    try {
      mod = (await import(moduleUrl(spec, cwd))) as Record<string, unknown>;
    } catch (cause) {
      throw new ConfigError(`${VARIABLE}: cannot load ${spec}: ${(cause as Error)?.message ?? String(cause)}`, {
        cause,
      });
    }
    const sources = mod.sources ?? [];
    const participants = mod.participants ?? [];
    if (!Array.isArray(sources) || !Array.isArray(participants) || sources.length + participants.length === 0) {
      throw new ConfigError(
        `${VARIABLE}: ${spec} registers nothing: export an array \`sources\` of defineReconcileSource(…) results (and optionally \`participants\`)`,
      );
    }
    sources.forEach((s: unknown, i) => {
      if ((s as ReconcileSource)?.kind !== 'postbox.reconcile-source')
        throw new ConfigError(
          `${VARIABLE}: ${spec}: sources[${i}] is not a reconcile source (pass it through defineReconcileSource from @postbox/engine/reconcile)`,
        );
      out.sources.push(s as ReconcileSource);
    });
    participants.forEach((p: unknown, i) => {
      if ((p as ParticipantRecords)?.kind !== 'postbox.reconcile-participants')
        throw new ConfigError(
          `${VARIABLE}: ${spec}: participants[${i}] is not a defineParticipantRecords(…) result (@postbox/engine/reconcile)`,
        );
      out.participants.push(p as ParticipantRecords);
    });
  }
  return out;
}

function moduleUrl(spec: string, cwd: string): string {
  const [path, query] = spec.split('?', 2) as [string, string | undefined];
  const isPath = path.startsWith('.') || isAbsolute(path) || /\.(?:[cm]?[jt]s)$/.test(path);
  if (!isPath) return spec;
  const url = pathToFileURL(resolve(cwd, path));
  if (query) url.search = query;
  return url.href;
}
