import type { ApiConfig } from '../config/api.ts';
import type { PostboxConfig } from '../config/env.ts';
import { createApiResources } from '../graphql/deps.ts';
import { type ControlPlane, startControlPlane } from '../graphql/server.ts';
import { portHint, type RoleSet } from './role-set.ts';

/**
 * The control plane as roles of a command: its connections, then the HTTP server (a taken port says which
 * variable to set), each stopped by the RoleSet; prints where it listens and the development token.
 */
export async function startControlPlaneRoles(
  roles: RoleSet,
  config: PostboxConfig,
  api: ApiConfig,
): Promise<ControlPlane> {
  const resources = await roles.start(
    'control plane resources',
    async () => createApiResources(config),
    (r) => r.close(),
  );
  const plane = await roles.start(
    'control plane',
    () => startControlPlane(api, resources.deps),
    (p) => p.close(),
    portHint(api.port, 'POSTBOX_API_PORT'),
  );
  console.log(`GraphQL control plane: ${plane.url}${api.production ? '' : ' (GraphiQL in a browser)'}`);
  if (api.devToken) console.log(`development operator token (this run only): Authorization: Bearer ${api.devToken}`);
  return plane;
}
