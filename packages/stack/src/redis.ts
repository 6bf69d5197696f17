import fs from 'node:fs/promises';
import { StackError } from './errors.ts';
import { exchange, formatAddress, type HostPort } from './ports.ts';
import { requireExecutable } from './prerequisites.ts';
import { ownedPid, readPidFile, run, terminate } from './process.ts';
import { setTimeout as sleep } from 'node:timers/promises';
import type { StackPaths } from './paths.ts';
import type { LocalService } from './service.ts';
import { TLS_HOST, type TlsMaterial } from './tls.ts';

const ADDRESS: HostPort = { host: '127.0.0.1', port: 16379 };
/** The stack's TLS port (`up --tls`). */
export const REDIS_TLS_PORT = 16380;

export const REDIS_URL = `redis://${formatAddress(ADDRESS)}`;

/**
 * The stack's Redis; a private one (stack/private.ts) passes its own paths and port. With TLS material it also
 * serves TLS on `tls.port` (clients need no certificate) and knows the material's ACL user. The default user keeps
 * the plain port working for the tests (a development stack, not a production setup).
 */
export function redisService(
  paths: StackPaths,
  port = ADDRESS.port,
  tls?: { material: TlsMaterial; port: number },
  alsoOn?: string,
): LocalService {
  const { redis } = paths;
  const address = { host: ADDRESS.host, port };
  const url = `redis://${formatAddress(address)}`;
  return {
    name: 'redis',
    address,
    otherPorts: tls ? [{ host: ADDRESS.host, port: tls.port }] : [],
    envVar: 'REDIS_URL',
    url,
    dataDir: redis.dir,
    logFile: redis.log,
    mayRemovePidFile: true,
    pidFile: redis.pidFile,
    // Redis sets its process title to "redis-server <bind>:<port>": that tells ours from the machine's (6379).
    ownedPid: () => ownedPid(redis.pidFile, `redis-server ${formatAddress(address)}`),
    checkPrerequisites: async () => {
      await requireExecutable('redis-server');
    },
    start: async () => {
      const server = await requireExecutable('redis-server');
      await fs.mkdir(redis.dir, { recursive: true });
      // Durable enough for BullMQ (at most about a second of writes lost) and never evicting a job.
      // RDB snapshots off: the AOF is the one persistence mechanism.
      const args = [
        '--port',
        String(port),
        '--bind',
        ADDRESS.host,
        // A private test server may listen on a test bridge's address too (network namespaces with no route
        // out): protected mode would refuse those clients for want of a password.
        ...(alsoOn ? [alsoOn, '--protected-mode', 'no'] : []),
        '--appendonly',
        'yes',
        '--appendfsync',
        'everysec',
        '--maxmemory-policy',
        'noeviction',
        '--save',
        '',
        '--dir',
        redis.dir,
        '--daemonize',
        'yes',
        '--pidfile',
        redis.pidFile,
        '--logfile',
        redis.log,
        ...(tls ? await tlsArgs(tls.material, tls.port, redis.dir) : []),
      ];
      await run(server, args, { cwd: redis.dir, timeoutMs: 30_000 }).catch((err: unknown) => {
        throw new StackError('start_failed', `redis-server did not start; read ${redis.log}`, { cause: err });
      });
      // The daemonised child writes the pid file just after the parent exits.
      for (let i = 0; i < 50 && (await readPidFile(redis.pidFile)) === undefined; i++) await sleep(100);
    },
    ready: () => redisAnswers(url),
    stop: async (pid) => {
      // SIGTERM is Redis' SHUTDOWN: it flushes the AOF and removes its pid file.
      await terminate(pid, 30_000);
    },
    purge: () => fs.rm(redis.dir, { recursive: true, force: true }),
  };
}

/** TLS on its own port, and the ACL user in a file of its own (a password on the command line is in `ps`). */
async function tlsArgs(tls: TlsMaterial, port: number, dir: string): Promise<string[]> {
  const { username, password } = tls.redis;
  const aclFile = `${dir}/users.acl`;
  await fs.writeFile(aclFile, `user default on nopass ~* &* +@all\nuser ${username} on >${password} ~* &* +@all\n`, {
    mode: 0o600,
  });
  return [
    '--tls-port',
    String(port),
    '--tls-cert-file',
    tls.certFile,
    '--tls-key-file',
    tls.keyFile,
    '--tls-ca-cert-file',
    tls.caFile,
    '--tls-auth-clients',
    'no',
    '--aclfile',
    aclFile,
  ];
}

/** The URL of the TLS port as the material's ACL user, verified against the stack's CA and its host name. */
export function redisTlsUrl(port: number, tls: TlsMaterial): string {
  const { username, password } = tls.redis;
  return `rediss://${username}:${encodeURIComponent(password)}@${TLS_HOST}:${port}/?sslrootcert=${tls.caFile}`;
}

/** Resolves once the server at `url` answers PING (after AUTH when the URL carries credentials). */
export async function redisAnswers(url: string): Promise<void> {
  const parsed = new URL(url);
  const address = { host: parsed.hostname || '127.0.0.1', port: Number(parsed.port || 6379) };
  const commands: string[][] = [];
  if (parsed.password) {
    const password = decodeURIComponent(parsed.password);
    commands.push(parsed.username ? ['AUTH', decodeURIComponent(parsed.username), password] : ['AUTH', password]);
  }
  commands.push(['PING']);
  const reply = await exchange(address, commands.map(resp).join(''), commands.length);
  const lines = reply.split('\r\n');
  // While Redis loads its AOF it answers -LOADING; keep waiting until the last reply is the PONG.
  if (lines[commands.length - 1] !== '+PONG') {
    throw new Error(`redis at ${formatAddress(address)} answered ${JSON.stringify(reply.trim())}`);
  }
}

function resp(args: string[]): string {
  return `*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`;
}
