import { randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { StackError } from './errors.ts';
import { requireExecutable } from './prerequisites.ts';
import { fileExists, run } from './process.ts';

/**
 * The local stack's TLS material (`postbox stack up --tls`): a certificate authority of its own, one server
 * certificate for `localhost` (PostgreSQL, Redis and Kafka share it), and the credentials of the users TLS clients
 * log in as (Kafka SCRAM, a Redis ACL user). Made once with openssl under `<home>/tls`; the CA's key never leaves
 * that directory. The certificate names `localhost` only: a client that reaches a server by another name (say
 * 127.0.0.1) fails verification, as it must with `verify-full`.
 */
export interface TlsMaterial {
  dir: string;
  /** The CA clients trust (PEM). */
  caFile: string;
  /** The servers' certificate (PEM) and its PKCS#8 key, unencrypted, readable by the servers' users only. */
  certFile: string;
  keyFile: string;
  /** The Kafka SCRAM-SHA-256 user of the SASL_SSL listener: a super user (it may alter ACLs). */
  kafka: { username: string; password: string };
  /**
   * One Kafka SCRAM user per broker role, held to its ACLs by the broker's authorizer (`postbox migrate
   * --broker-acls` grants them): the least-privilege users of the relay, the consumers and the control plane.
   */
  kafkaRoles: Record<KafkaRoleUser, { username: string; password: string }>;
  /**
   * The NATS admin user of the TLS mode (every permission; a client that names no user is logged in as it,
   * `no_auth_user`), and one user per broker role, held to the permissions `postbox migrate --broker-acls
   * --broker-file` writes into the server's include (nats.ts).
   */
  nats: { username: string; password: string };
  natsRoles: Record<KafkaRoleUser, { username: string; password: string }>;
  /**
   * One RabbitMQ user per broker role, with no permission until the commands `postbox migrate --print` shows are
   * run (rabbitmq.ts); the admin is the node's guest user, loopback only.
   */
  rabbitmqRoles: Record<KafkaRoleUser, { username: string; password: string }>;
  /** The Redis ACL user of the TLS port (the default user keeps the plain port's access). */
  redis: { username: string; password: string };
}

/** The broker roles that get a user of their own on each broker (engine/migrate/broker-grants.ts). */
export type KafkaRoleUser = 'relay' | 'consumer' | 'api';

const KAFKA_ROLE_USERS: readonly KafkaRoleUser[] = ['relay', 'consumer', 'api'];

/** The name the server certificate is issued for. */
export const TLS_HOST = 'localhost';

const DAYS = '825';

export function tlsDir(home: string): string {
  return path.join(home, 'tls');
}

type LaterUsers = 'kafkaRoles' | 'nats' | 'natsRoles' | 'rabbitmqRoles';

/**
 * The material when `up --tls` made it (complete), else undefined. Material made before the role users existed
 * gets them here, written back to its credentials file.
 */
export async function readTlsMaterial(dir: string): Promise<TlsMaterial | undefined> {
  const files = materialFiles(dir);
  if (!(await fileExists(files.credentials))) return undefined;
  const stored = JSON.parse(await fs.readFile(files.credentials, 'utf8')) as Omit<
    TlsMaterial,
    'dir' | 'caFile' | 'certFile' | 'keyFile' | LaterUsers
  > &
    Partial<Pick<TlsMaterial, LaterUsers>>;
  const credentials = {
    ...stored,
    kafkaRoles: stored.kafkaRoles ?? roleUsers(),
    nats: stored.nats ?? { username: 'postbox', password: newPassword() },
    natsRoles: stored.natsRoles ?? roleUsers(),
    rabbitmqRoles: stored.rabbitmqRoles ?? roleUsers(),
  };
  if (!stored.kafkaRoles || !stored.nats || !stored.natsRoles || !stored.rabbitmqRoles)
    await fs.writeFile(files.credentials, `${JSON.stringify(credentials, null, 2)}\n`, { mode: 0o600 });
  return { dir, caFile: files.ca, certFile: files.cert, keyFile: files.key, ...credentials };
}

/** Hex: a password that began with `-` would be read as an option by the command-line tools given it. */
function newPassword(): string {
  return randomBytes(18).toString('hex');
}

/** A user and a new password per broker role, named as the default principals are (User:postbox-<role>). */
function roleUsers(): TlsMaterial['kafkaRoles'] {
  return Object.fromEntries(
    KAFKA_ROLE_USERS.map((role) => [role, { username: `postbox-${role}`, password: newPassword() }]),
  ) as TlsMaterial['kafkaRoles'];
}

/**
 * Makes the material once (a CA, the server certificate, the users' passwords); later calls read it. The
 * credentials file is written last, so an interrupted run starts again from scratch. (PostgreSQL gets a copy of
 * the key it owns: postgres.ts.)
 */
export async function ensureTlsMaterial(dir: string): Promise<TlsMaterial> {
  const existing = await readTlsMaterial(dir);
  if (existing) return existing;
  const files = materialFiles(dir);
  await fs.rm(dir, { recursive: true, force: true });
  await fs.mkdir(dir, { recursive: true, mode: 0o755 });
  const ca = await makeCertificateAuthority(dir, 'Postbox local CA');
  await issueServerCertificate(ca, files.cert, files.key, TLS_HOST);
  await fs.chmod(files.key, 0o600);
  const credentials = {
    kafka: { username: 'postbox', password: newPassword() },
    redis: { username: 'postbox', password: newPassword() },
    kafkaRoles: roleUsers(),
    nats: { username: 'postbox', password: newPassword() },
    natsRoles: roleUsers(),
    rabbitmqRoles: roleUsers(),
  };
  await fs.writeFile(files.credentials, `${JSON.stringify(credentials, null, 2)}\n`, { mode: 0o600 });
  return { dir, caFile: files.ca, certFile: files.cert, keyFile: files.key, ...credentials };
}

export interface CertificateAuthority {
  caFile: string;
  caKeyFile: string;
}

/** A self-signed CA (`ca.pem`, `ca.key`) in `dir`: the stack's own, or another one for tests of a wrong CA. */
export async function makeCertificateAuthority(dir: string, name: string): Promise<CertificateAuthority> {
  const caFile = path.join(dir, 'ca.pem');
  const caKeyFile = path.join(dir, 'ca.key');
  await openssl([
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-sha256',
    '-days',
    DAYS,
    '-keyout',
    caKeyFile,
    '-out',
    caFile,
    '-subj',
    `/CN=${name}`,
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign,cRLSign',
  ]);
  await fs.chmod(caKeyFile, 0o600);
  return { caFile, caKeyFile };
}

/** A server certificate for `host` (DNS name only) signed by `ca`, with its PKCS#8 key. */
export async function issueServerCertificate(
  ca: CertificateAuthority,
  certFile: string,
  keyFile: string,
  host: string,
): Promise<void> {
  const csr = `${certFile}.csr`;
  const ext = `${certFile}.ext`;
  await openssl(['genpkey', '-algorithm', 'RSA', '-pkeyopt', 'rsa_keygen_bits:2048', '-out', keyFile]);
  await openssl(['req', '-new', '-key', keyFile, '-subj', `/CN=${host}`, '-out', csr]);
  await fs.writeFile(
    ext,
    [
      `subjectAltName=DNS:${host}`,
      'basicConstraints=CA:FALSE',
      'keyUsage=critical,digitalSignature,keyEncipherment',
      'extendedKeyUsage=serverAuth',
      '',
    ].join('\n'),
  );
  await openssl([
    'x509',
    '-req',
    '-in',
    csr,
    '-CA',
    ca.caFile,
    '-CAkey',
    ca.caKeyFile,
    '-CAcreateserial',
    '-sha256',
    '-days',
    DAYS,
    '-out',
    certFile,
    '-extfile',
    ext,
  ]);
  await Promise.all([fs.rm(csr), fs.rm(ext)]);
}

function materialFiles(dir: string) {
  return {
    ca: path.join(dir, 'ca.pem'),
    cert: path.join(dir, 'server.pem'),
    key: path.join(dir, 'server.key'),
    credentials: path.join(dir, 'credentials.json'),
  };
}

async function openssl(args: string[]): Promise<void> {
  const bin = await requireExecutable('openssl');
  await run(bin, args, { timeoutMs: 60_000 }).catch((err: unknown) => {
    throw new StackError('command_failed', `openssl ${args[0]} failed while making the stack's TLS material`, {
      cause: err,
    });
  });
}
