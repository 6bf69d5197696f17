import { createHash } from 'node:crypto';
import { constants } from 'node:fs';
import fs from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { StackError } from './errors.ts';
import { formatAddress, type HostPort } from './ports.ts';
import { stackPaths, type StackPaths } from './paths.ts';
import { setTimeout as sleep } from 'node:timers/promises';
import { isAlive, ownedPid, readPidFile, run, spawnDetached, terminate } from './process.ts';
import type { LocalService } from './service.ts';
import { TLS_HOST, type KafkaRoleUser, type TlsMaterial } from './tls.ts';

const HOST = '127.0.0.1';
/** AMQP, Erlang distribution and the node's own epmd: never the machine's 5672, 25672 and 4369. */
export const RABBITMQ_PORTS = { amqp: 15680, dist: 25680, epmd: 14369 };

export const RABBITMQ_URL = `amqp://guest:guest@${HOST}:${RABBITMQ_PORTS.amqp}`;

/** Debian's server script, run directly: the /usr/sbin wrapper would switch to the system's rabbitmq user and files. */
const SERVER = '/usr/lib/rabbitmq/bin/rabbitmq-server';
const CTL = '/usr/lib/rabbitmq/bin/rabbitmqctl';
const INSTALL = 'apt-get install -y rabbitmq-server';

/**
 * The stack's RabbitMQ node (Debian's `rabbitmq-server`), private in every respect: its own node name, ports,
 * Erlang cookie (its HOME), epmd port, data, logs and config — never the machine's shared 5672 node. Durable
 * queues are quorum queues (Raft, fsynced before a publisher confirm), so durability is the server's default.
 */
/**
 * With `tls` (material and a port): an AMQPS listener there too, beside the plain one the stack's checks use. With
 * `amqpHost` (a private test node): its AMQP listener on that address instead of loopback, the guest user allowed
 * from it; the node's epmd and distribution stay on loopback.
 */
export function rabbitmqService(
  paths: StackPaths,
  ports = RABBITMQ_PORTS,
  tls?: { material: TlsMaterial; port: number },
  amqpHost = HOST,
): LocalService {
  const { rabbitmq } = paths;
  const address = { host: amqpHost, port: ports.amqp };
  const url = `amqp://guest:guest@${formatAddress(address)}`;
  const env = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: rabbitmq.home,
    ERL_EPMD_PORT: String(ports.epmd),
    // The node's epmd and its distribution port on loopback only, as its AMQP listener (they bind every interface
    // by default; the private cookie is then all that guards the node).
    ERL_EPMD_ADDRESS: HOST,
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS: '-kernel inet_dist_use_interface {127,0,0,1}',
    // The node's log to standard output, which is `logFile`: where the stack points when a start fails.
    RABBITMQ_LOGS: '-',
    RABBITMQ_NODENAME: `postbox-${ports.amqp}@localhost`,
    RABBITMQ_NODE_IP_ADDRESS: amqpHost,
    RABBITMQ_NODE_PORT: String(ports.amqp),
    RABBITMQ_DIST_PORT: String(ports.dist),
    RABBITMQ_MNESIA_BASE: rabbitmq.data,
    RABBITMQ_LOG_BASE: rabbitmq.logs,
    RABBITMQ_CONFIG_FILE: rabbitmq.config,
    RABBITMQ_ADVANCED_CONFIG_FILE: path.join(rabbitmq.dir, 'advanced.config'),
    RABBITMQ_ENABLED_PLUGINS_FILE: rabbitmq.plugins,
    RABBITMQ_PID_FILE: rabbitmq.pidFile,
    // Not the system's /etc/rabbitmq/rabbitmq-env.conf.
    RABBITMQ_CONF_ENV_FILE: path.join(rabbitmq.dir, 'rabbitmq-env.conf'),
  };
  return {
    name: 'rabbitmq',
    address,
    otherPorts: [{ host: HOST, port: ports.dist }, ...(tls ? [{ host: HOST, port: tls.port }] : [])],
    envVar: 'RABBITMQ_URL',
    url,
    dataDir: rabbitmq.data,
    logFile: rabbitmq.log,
    mayRemovePidFile: true,
    pidFile: rabbitmq.pidFile,
    // The node's command line names its HOME (`-home <dir>`): that tells ours from any other node.
    ownedPid: () => ownedPid(rabbitmq.pidFile, rabbitmq.home),
    checkPrerequisites: requireServer,
    start: async () => {
      await requireServer();
      await Promise.all([rabbitmq.home, rabbitmq.data, rabbitmq.logs].map((d) => fs.mkdir(d, { recursive: true })));
      await fs.writeFile(rabbitmq.config, config(address, tls));
      await fs.writeFile(rabbitmq.plugins, '[].\n');
      await fs.writeFile(ctlScript(paths), ctlWrapper(env), { mode: 0o700 });
      const script = spawnDetached(SERVER, [], rabbitmq.log, { env, cwd: rabbitmq.dir });
      // The node writes its pid file a few seconds into its boot (the script execs into the VM, same pid).
      for (let i = 0; i < 600 && (await readPidFile(rabbitmq.pidFile)) === undefined && isAlive(script); i++)
        await sleep(100);
    },
    ready: async () => {
      await rabbitmqAnswers(url);
      if (tls) await ensureRoleUsers(paths, tls.material);
    },
    // SIGTERM is a graceful shutdown (queues and the message store flushed); then the node's own epmd goes too.
    stop: async (pid) => {
      await terminate(pid, 60_000);
      await stopEpmd(ports.epmd);
    },
    purge: () => fs.rm(rabbitmq.dir, { recursive: true, force: true }),
  };
}

/**
 * `rabbitmqctl` for this node (its name, Erlang cookie and epmd port), written at every start under the node's
 * directory: what runs the commands `postbox migrate --print` shows for RabbitMQ against a node of ours.
 */
export function rabbitmqctlScript(home: string): string {
  return ctlScript(stackPaths(home));
}

function ctlScript(paths: StackPaths): string {
  return path.join(paths.rabbitmq.dir, 'rabbitmqctl');
}

function ctlWrapper(env: Record<string, string>): string {
  const names = ['HOME', 'ERL_EPMD_PORT', 'RABBITMQ_NODENAME', 'RABBITMQ_CONF_ENV_FILE'];
  const exports = names.map((n) => `export ${n}='${(env[n] ?? '').replaceAll("'", "'\\''")}'`);
  return [
    '#!/bin/sh',
    '# Written by `postbox stack up` at every start: rabbitmqctl for this node.',
    ...exports,
    `exec ${CTL} "$@"`,
    '',
  ].join('\n');
}

/**
 * The TLS mode's role users (the material's rabbitmqRoles) exist with their passwords — and no permission until
 * the commands `postbox migrate --print` shows are run. Done once per set of passwords: a marker in the node's
 * data says which.
 */
async function ensureRoleUsers(paths: StackPaths, material: TlsMaterial): Promise<void> {
  const users = Object.values(material.rabbitmqRoles);
  const marker = path.join(paths.rabbitmq.data, '.postbox-role-users');
  const fingerprint = createHash('sha256')
    .update(users.map((u) => `${u.username}:${u.password}`).join('\n'))
    .digest('hex');
  if ((await fs.readFile(marker, 'utf8').catch(() => '')) === fingerprint) return;
  const ctl = (args: string[]) => run(ctlScript(paths), ['-q', ...args], { timeoutMs: 60_000 });
  const { stdout } = await ctl(['list_users', '--formatter', 'json']);
  const existing = new Set((JSON.parse(stdout) as Array<{ user: string }>).map((u) => u.user));
  // The password is a command argument: a failure is reported without the command line.
  // A password is a command argument: it is masked in the failure reported.
  for (const u of users)
    await ctl([existing.has(u.username) ? 'change_password' : 'add_user', u.username, u.password]).catch(
      (cause: unknown) => {
        const said = (cause as Error).message.replaceAll(u.password, '***');
        throw new StackError('start_failed', `adding the RabbitMQ user ${u.username} failed: ${said}`);
      },
    );
  await fs.writeFile(marker, fingerprint);
}

/**
 * The AMQPS URL of a server of ours, by the certificate's host name and verified against the stack's CA: as the
 * guest user (every permission), or with `role` as that role's user.
 */
export function rabbitmqTlsUrl(port: number, tls: TlsMaterial, role?: KafkaRoleUser): string {
  const u = role ? tls.rabbitmqRoles[role] : { username: 'guest', password: 'guest' };
  const login = `${encodeURIComponent(u.username)}:${encodeURIComponent(u.password)}`;
  return `amqps://${login}@${TLS_HOST}:${port}/?sslrootcert=${tls.caFile}`;
}

/**
 * Ends the epmd daemon a node of ours started on its own port (the node starts one when none listens there, and
 * it outlives the node). Nothing else registers on that port.
 */
export async function stopEpmd(port: number): Promise<void> {
  const env = { PATH: process.env.PATH ?? '/usr/bin:/bin', ERL_EPMD_PORT: String(port) };
  // epmd refuses to die while a node is registered ("Killing not allowed - living nodes in database"), and a node
  // just killed stays registered until epmd has seen its connection close: asked again until it is gone.
  for (let attempt = 0; attempt < 20; attempt++) {
    // Exit 1 either way: "not allowed" (a node registered) is the one to wait out; anything else means no epmd.
    const killed = await run('epmd', ['-kill'], { env, timeoutMs: 5000 }).then(
      () => true,
      (cause: unknown) => !/not allowed/i.test((cause as Error).message),
    );
    if (killed) return;
    await sleep(250);
  }
}

async function requireServer(): Promise<void> {
  try {
    await fs.access(SERVER, constants.X_OK);
  } catch {
    throw new StackError('prerequisite_missing', `rabbitmq-server not found (${SERVER}): ${INSTALL}`);
  }
}

function config(address: HostPort, tls?: { material: TlsMaterial; port: number }): string {
  const secure = tls
    ? [
        `listeners.ssl.default = ${formatAddress({ host: HOST, port: tls.port })}`,
        `ssl_options.cacertfile = ${tls.material.caFile}`,
        `ssl_options.certfile = ${tls.material.certFile}`,
        `ssl_options.keyfile = ${tls.material.keyFile}`,
        // Clients present no certificate: they log in with a user and password, inside TLS.
        'ssl_options.verify = verify_none',
        'ssl_options.fail_if_no_peer_cert = false',
      ]
    : [];
  return [
    '# Written by `postbox stack up`; rewritten at every start.',
    `listeners.tcp.default = ${formatAddress(address)}`,
    ...secure,
    // The guest user, from loopback only (the server's default) — unless the node listens elsewhere: a private
    // test node on a test bridge's address (network namespaces with no route out).
    ...(address.host === HOST ? [] : ['loopback_users = none']),
    // One message size limit across brokers (NATS' max_payload): publishers refuse larger ones before sending.
    'max_message_size = 1048576',
    '',
  ].join('\n');
}

/**
 * Resolves once the server at `url` answers the AMQP 0-9-1 protocol header with connection.start: RabbitMQ opens
 * its AMQP listener only when it has booted.
 */
export function rabbitmqAnswers(url: string, timeoutMs = 2000): Promise<void> {
  const parsed = new URL(url);
  const address = { host: parsed.hostname || HOST, port: Number(parsed.port || 5672) };
  return new Promise((resolve, reject) => {
    const socket = net.connect(address);
    let reply = Buffer.alloc(0);
    const fail = (error: Error) => {
      socket.destroy();
      reject(error);
    };
    socket.setTimeout(timeoutMs, () =>
      fail(new Error(`no reply from ${formatAddress(address)} within ${timeoutMs} ms`)),
    );
    socket.once('connect', () => socket.write(Buffer.from('AMQP\x00\x00\x09\x01', 'latin1')));
    socket.on('data', (chunk: Buffer) => {
      reply = Buffer.concat([reply, chunk]);
      if (reply.length < 11) return;
      socket.destroy();
      // A method frame (type 1) on channel 0 carrying connection.start (class 10, method 10).
      if (reply[0] === 1 && reply.readUInt16BE(7) === 10 && reply.readUInt16BE(9) === 10) resolve();
      else
        reject(
          new Error(
            `rabbitmq at ${formatAddress(address)} answered ${JSON.stringify(reply.subarray(0, 16).toString('latin1'))}`,
          ),
        );
    });
    socket.once('error', fail);
    socket.once('end', () => fail(new Error(`rabbitmq at ${formatAddress(address)} closed the connection`)));
  });
}
