import type { SagaOrchestrator } from '@postbox/engine/saga';
import type { ApiConfig } from '../config/api.ts';
import type { PostboxConfig } from '../config/env.ts';
import { createApiResources } from '../graphql/deps.ts';
import { loadReconcileModules, type ReconcileRegistrations } from '../reconcile/modules.ts';
import { type ControlPlane, startControlPlane } from '../graphql/server.ts';
import { describeDefinitions, loadSagaOrchestrator, registerSagaDefinitions } from '../sagas/modules.ts';
import { portHint, type RoleSet } from './role-set.ts';

export interface ControlPlaneRoleOptions {
  /**
   * The saga orchestrator of the process that hosts the control plane (`postbox start` passes its own, already
   * registered): operator actions use its definitions. Without it they come from `api.sagaModules`
   * (POSTBOX_SAGA_MODULES), checked against the database like any process that moves sagas.
   */
  sagas?: SagaOrchestrator;
  /**
   * The reconciliation sources (and participant records) of the process that hosts the control plane (`postbox
   * start` passes the demo's). Without it they come from `api.reconcileModules` (POSTBOX_RECONCILE_MODULES).
   */
  reconcile?: ReconcileRegistrations;
}

/**
 * The control plane as roles of a command: its saga definitions, its connections, then the HTTP server (a taken
 * port says which variable to set), each stopped by the RoleSet; prints where it listens and the development token.
 */
export async function startControlPlaneRoles(
  roles: RoleSet,
  config: PostboxConfig,
  api: ApiConfig,
  options: ControlPlaneRoleOptions = {},
): Promise<ControlPlane> {
  const sagas =
    options.sagas ??
    (await roles.start(
      'saga definitions',
      () => loadSagaOrchestrator(api.sagaModules ?? []),
      async () => {},
      (cause) => (cause as Error)?.message,
    ));
  const reconcile =
    options.reconcile ??
    (await roles.start(
      'reconcile sources',
      () => loadReconcileModules(api.reconcileModules ?? []),
      async () => {},
      (cause) => (cause as Error)?.message,
    ));
  const resources = await roles.start(
    'control plane resources',
    async () =>
      createApiResources(config, {
        ...(sagas ? { sagas } : {}),
        reconcile,
        ...(api.reconcileGraceMs ? { reconcileGraceMs: api.reconcileGraceMs } : {}),
      }),
    (r) => r.close(),
  );
  if (sagas && !options.sagas) {
    await roles.start(
      'saga definitions check',
      () => registerSagaDefinitions(resources.deps.sql, sagas),
      async () => {},
      (cause) => (cause as Error)?.message,
    );
  }
  const plane = await roles.start(
    'control plane',
    () => startControlPlane(api, resources.deps),
    (p) => p.close(),
    portHint(api.port, 'POSTBOX_API_PORT'),
  );
  console.log(`GraphQL control plane: ${plane.url}${api.production ? '' : ' (GraphiQL in a browser)'}`);
  if (api.devToken) console.log(`development operator token (this run only): Authorization: Bearer ${api.devToken}`);
  console.log(
    sagas
      ? `saga actions for: ${describeDefinitions(sagas)}`
      : 'saga actions: no definitions loaded (POSTBOX_SAGA_MODULES); sagas can be read, not acted on',
  );
  console.log(
    reconcile.sources.length > 0
      ? `reconciliation sources: ${reconcile.sources.map((s) => `${s.aggregateType} (${s.topic})`).join(', ')}`
      : 'reconciliation: no sources registered (POSTBOX_RECONCILE_MODULES); the outbox and consumer checks are skipped',
  );
  return plane;
}
