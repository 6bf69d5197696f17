import fs from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { exchange, formatAddress, type HostPort } from './ports.ts';
import type { StackPaths } from './paths.ts';
import { requireExecutable } from './prerequisites.ts';
import { ownedPid, readPidFile, spawnDetached, terminate } from './process.ts';
import type { LocalService } from './service.ts';
import { stackPaths } from './paths.ts';
import { TLS_HOST, type KafkaRoleUser, type TlsMaterial } from './tls.ts';

const ADDRESS: HostPort = { host: '127.0.0.1', port: 14222 };

export const NATS_URL = `nats://${formatAddress(ADDRESS)}`;

/**
 * The stack's NATS server with JetStream on file storage (Debian's `nats-server`), on the project's own port:
 * never the machine's shared 4222. A private one (stack/private.ts) passes its own paths and port.
 *
 * Durability: nats-server 2.9 has no `sync_interval` setting (2.10 added `sync_interval: always`): its file
 * store is fsynced on the server's own timer, not per message — as a single Kafka broker with acks=all leaves its
 * log to the page cache (`log.flush.interval.messages` unset).
 */
export function natsService(
  paths: StackPaths,
  port = ADDRESS.port,
  tls?: TlsMaterial,
  host = ADDRESS.host,
): LocalService {
  const { nats } = paths;
  const address = { host, port };
  const url = `nats://${formatAddress(address)}`;
  return {
    name: 'nats',
    address,
    otherPorts: [],
    envVar: 'NATS_URL',
    url,
    dataDir: nats.dir,
    logFile: nats.log,
    mayRemovePidFile: true,
    pidFile: nats.pidFile,
    // The command line names our config file: that tells ours from the machine's nats-server (4222).
    ownedPid: () => ownedPid(nats.pidFile, nats.config),
    checkPrerequisites: async () => {
      await requireExecutable('nats-server');
    },
    start: async () => {
      const server = await requireExecutable('nats-server');
      await fs.mkdir(nats.store, { recursive: true });
      if (tls) await ensurePermissionsInclude(permissionsFile(paths));
      await fs.writeFile(nats.config, config(address, paths, tls));
      spawnDetached(server, ['-c', nats.config], nats.log, { cwd: nats.dir });
      // nats-server writes its pid file once it has parsed the config and bound its port.
      for (let i = 0; i < 50 && (await readPidFile(nats.pidFile)) === undefined; i++) await sleep(100);
    },
    ready: () => natsAnswers(url, tls !== undefined),
    // SIGTERM is a graceful shutdown: JetStream flushes its stores; the server removes its pid file.
    stop: async (pid) => {
      await terminate(pid, 30_000);
    },
    purge: () => fs.rm(nats.dir, { recursive: true, force: true }),
  };
}

/**
 * With TLS material: TLS required of every client on the port (nats-server 2.9 has no mixed mode), and users: the
 * material's admin (every permission; a client that names no user is logged in as it, so what ran before the role
 * users keeps running) and one user per broker role, whose permissions are the variables of the include file —
 * `postbox migrate --broker-acls --broker-file` writes it, the server reads it again on SIGHUP.
 */
function config(address: HostPort, paths: StackPaths, tls?: TlsMaterial): string {
  const { nats } = paths;
  const secure = tls
    ? [
        `tls { cert_file: ${JSON.stringify(tls.certFile)}, key_file: ${JSON.stringify(tls.keyFile)}, timeout: 2 }`,
        'authorization {',
        `  include ${JSON.stringify(path.basename(permissionsFile(paths)))}`,
        '  users = [',
        `    { user: ${JSON.stringify(tls.nats.username)}, password: ${JSON.stringify(tls.nats.password)} }`,
        ...ROLES.map((role) => {
          const u = tls.natsRoles[role];
          return `    { user: ${JSON.stringify(u.username)}, password: ${JSON.stringify(u.password)}, permissions: $${permissionsVariable(role)} }`;
        }),
        '  ]',
        '}',
        `no_auth_user: ${JSON.stringify(tls.nats.username)}`,
      ]
    : [];
  return [
    '# Written by `postbox stack up`; rewritten at every start.',
    ...secure,
    `listen: ${JSON.stringify(formatAddress(address))}`,
    `pid_file: ${JSON.stringify(nats.pidFile)}`,
    // The stream store; limits stay the server's defaults (a fraction of memory and of the disk).
    `jetstream { store_dir: ${JSON.stringify(nats.store)} }`,
    '',
  ].join('\n');
}

const ROLES: readonly KafkaRoleUser[] = ['relay', 'consumer', 'api'];

/** The variable a role's permissions are in (engine/migrate/broker-permissions.ts, natsPermissionsVariable). */
function permissionsVariable(role: KafkaRoleUser): string {
  return `POSTBOX_${role.toUpperCase()}_PERMISSIONS`;
}

function permissionsFile(paths: StackPaths): string {
  return path.join(paths.nats.dir, 'postbox-permissions.conf');
}

/**
 * The include file of the role users' permissions, under a NATS server's home (a private server's, or the stack's
 * `.postbox`): where `postbox migrate --broker-acls --broker-file` writes them.
 */
export function natsPermissionsFile(home: string): string {
  return permissionsFile(stackPaths(home));
}

/**
 * Made once, denying the roles everything (an allow list left empty would allow all); kept across starts, since
 * it holds what `postbox migrate` wrote.
 */
async function ensurePermissionsInclude(file: string): Promise<void> {
  const denyAll = ROLES.flatMap((role) => [
    `${permissionsVariable(role)} = { publish = { deny = [">"] }, subscribe = { deny = [">"] } }`,
  ]);
  const text = [
    '# No grants yet: postbox migrate --broker-acls --broker-file <this file> writes them.',
    ...denyAll,
    '',
  ];
  await fs.writeFile(file, text.join('\n'), { flag: 'wx' }).catch((cause: NodeJS.ErrnoException) => {
    if (cause.code !== 'EEXIST') throw cause;
  });
}

/**
 * The URL of a TLS-only server of ours, by the certificate's host name: as the admin (no user named), or with
 * `role` as that role's user.
 */
export function natsTlsUrl(port: number, tls?: TlsMaterial, role?: KafkaRoleUser): string {
  if (!tls || !role) return `tls://${TLS_HOST}:${port}`;
  const u = tls.natsRoles[role];
  return `tls://${encodeURIComponent(u.username)}:${encodeURIComponent(u.password)}@${TLS_HOST}:${port}`;
}

/**
 * Resolves once the server at `url` answers a PING after CONNECT and announces JetStream in its INFO: a NATS
 * without JetStream could take publishes but never confirm them.
 */
export async function natsAnswers(url: string, tls = false): Promise<void> {
  const parsed = new URL(url);
  const address = { host: parsed.hostname || '127.0.0.1', port: Number(parsed.port || 4222) };
  // A TLS-only server sends its INFO in clear and then wants the handshake: INFO is the answer checked.
  if (tls || parsed.protocol === 'tls:') return infoAnnounces(address, await exchange(address, '', 1));
  const connect = { verbose: false, pedantic: false, name: 'postbox-stack', lang: 'node', version: '0', protocol: 1 };
  if (parsed.username) Object.assign(connect, { user: decodeURIComponent(parsed.username) });
  if (parsed.password) Object.assign(connect, { pass: decodeURIComponent(parsed.password) });
  const reply = await exchange(address, `CONNECT ${JSON.stringify(connect)}\r\nPING\r\n`, 2);
  const [, pong] = reply.split('\r\n');
  if (pong !== 'PONG')
    throw new Error(`nats at ${formatAddress(address)} answered ${JSON.stringify(reply.trim().slice(0, 200))}`);
  infoAnnounces(address, reply);
}

function infoAnnounces(address: HostPort, reply: string): void {
  const [info] = reply.split('\r\n');
  if (!info?.startsWith('INFO '))
    throw new Error(`nats at ${formatAddress(address)} answered ${JSON.stringify(reply.trim().slice(0, 200))}`);
  const announced = JSON.parse(info.slice(5)) as { jetstream?: boolean };
  if (announced.jetstream !== true)
    throw new Error(
      `nats at ${formatAddress(address)} runs without JetStream (start it with -js or a jetstream block)`,
    );
}
