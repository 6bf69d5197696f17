import { execFile } from 'node:child_process';
import fs from 'node:fs';
import { promisify } from 'node:util';

const exec = promisify(execFile);

/**
 * Network namespaces for partition tests: a bridge `pbx<N>` at 10.231.N.1/24 in the root namespace, and one
 * namespace per role (`pbx<N>-<role>`, 10.231.N.<10+i>) joined to it by a veth pair. The servers stay in the root
 * namespace and listen on the bridge's address as well as loopback; a role reaches them only through the bridge,
 * so a rule inside the role's namespace cuts that role alone, while the test itself (root namespace) keeps its
 * own connections. The namespaces have no route anywhere else.
 *
 * Cuts are nftables sets in an `inet pbxfault` table of the role's namespace, keyed by the server's port:
 * - `drop`: packets to the port vanish (a silent partition: connects time out, established streams stall);
 * - `reset`: the role's packets to the port are answered by a TCP reset (a loud partition);
 * - `oneway`: packets from the port vanish (requests reach the server, which acts; its replies never arrive).
 * A fourth set, by address (`cutPeers`), drops every packet to and from other namespaces' addresses: a server run
 * inside a namespace (a cluster's node) loses its peers while the root namespace (the test, its roles) still
 * reaches it. The root namespace's rules are never touched.
 */
export type CutMode = 'drop' | 'reset' | 'oneway';

const SETS: Record<CutMode, string> = { drop: 'drop_to', reset: 'reset_to', oneway: 'drop_from' };
const REGISTRY = '/run/postbox-netns';

export interface Netns {
  /** The bridge's address: what servers listen on and roles connect to. */
  readonly host: string;
  /** `pbx<N>-<role>` for each role given to createNetns. */
  name(role: string): string;
  /** The role's own address (what a server sees as its client's, e.g. in pg_stat_activity). */
  address(role: string): string;
  /** Cuts the role off from the servers on these ports, in the given mode (adds to any cut in place). */
  cut(role: string, ports: number[], mode: CutMode): Promise<void>;
  /** Removes these cuts of the role, leaving its others. */
  uncut(role: string, ports: number[], mode: CutMode): Promise<void>;
  /**
   * Drops every packet between the role and these addresses (other roles' `address()`), both ways, whatever the
   * port: the role's namespace is partitioned from theirs; the bridge's host still reaches it.
   */
  cutPeers(role: string, addresses: string[]): Promise<void>;
  /** Removes every cut of the role (by port and by address). */
  heal(role: string): Promise<void>;
  /** From inside the role's namespace: does a TCP connect to host:port succeed within `timeoutMs`? */
  probe(role: string, port: number, timeoutMs?: number, host?: string): Promise<'ok' | 'timeout' | 'refused'>;
  /** The role's cuts as nft lists them (for a failure message). */
  describe(role: string): Promise<string>;
  /** Ends every process left in the namespaces, deletes them and the bridge. */
  destroy(): Promise<void>;
}

async function run(cmd: string, args: string[], what: string): Promise<string> {
  try {
    const { stdout } = await exec(cmd, args, { encoding: 'utf8', timeout: 15_000 });
    return stdout;
  } catch (cause) {
    const e = cause as { stderr?: string; message: string };
    throw new Error(`${what} failed (${cmd} ${args.join(' ')}): ${(e.stderr || e.message).trim()}`, { cause });
  }
}

/** Refuses to start without root and nft: partition tests that cannot cut would prove nothing. */
async function requireTools(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('network partition tests need root (ip netns, nft)');
  for (const tool of ['ip', 'nft'])
    await run('sh', ['-c', `command -v ${tool}`], `looking for ${tool}`).catch((cause) => {
      throw new Error(`${tool} is not installed: apt-get install -y iproute2 nftables`, { cause });
    });
}

const ruleset = (host: string) => `table inet pbxfault {
  set drop_to { type inet_service; }
  set reset_to { type inet_service; }
  set drop_from { type inet_service; }
  set peers { type ipv4_addr; }
  chain output {
    type filter hook output priority -10; policy accept;
    ip daddr @peers drop
    ip daddr ${host} tcp dport @drop_to drop
    ip daddr ${host} tcp dport @reset_to reject with tcp reset
  }
  chain input {
    type filter hook input priority -10; policy accept;
    ip saddr @peers drop
    ip saddr ${host} tcp sport @drop_from drop
  }
}
`;

/** Namespaces of a test process that died without destroy(): their owner's pid is gone. */
async function sweepLeftovers(): Promise<void> {
  fs.mkdirSync(REGISTRY, { recursive: true });
  for (const entry of fs.readdirSync(REGISTRY)) {
    const owner = Number(fs.readFileSync(`${REGISTRY}/${entry}`, 'utf8'));
    if (ownerAlive(owner)) continue;
    await removeNet(Number(entry)).catch(() => {});
    fs.rmSync(`${REGISTRY}/${entry}`, { force: true });
  }
}

function ownerAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function removeNet(n: number): Promise<void> {
  const all = await run('ip', ['netns', 'list'], 'listing namespaces');
  for (const line of all.split('\n')) {
    const ns = line.split(' ')[0];
    if (!ns?.startsWith(`pbx${n}-`)) continue;
    const pids = (await run('ip', ['netns', 'pids', ns], 'listing pids')).split('\n').filter(Boolean);
    for (const pid of pids) {
      try {
        process.kill(Number(pid), 'SIGKILL');
      } catch {
        // already gone
      }
    }
    await run('ip', ['netns', 'del', ns], `deleting ${ns}`);
  }
  await run('ip', ['link', 'del', `pbx${n}`], 'deleting the bridge').catch(() => {});
}

/** A subnet no other live test process holds. */
function claimSubnet(): number {
  for (let attempt = 0; attempt < 50; attempt++) {
    const n = 1 + Math.floor(Math.random() * 250);
    try {
      fs.writeFileSync(`${REGISTRY}/${n}`, String(process.pid), { flag: 'wx' });
      return n;
    } catch {
      // taken
    }
  }
  throw new Error(`no free 10.231.N.0/24 subnet for test namespaces (see ${REGISTRY})`);
}

export async function createNetns(roles: string[]): Promise<Netns> {
  await requireTools();
  await sweepLeftovers();
  const n = claimSubnet();
  const host = `10.231.${n}.1`;
  const bridge = `pbx${n}`;
  const nsName = (role: string) => {
    if (!roles.includes(role)) throw new Error(`no namespace for role "${role}" (have: ${roles.join(', ')})`);
    return `pbx${n}-${role}`;
  };
  const nft = (role: string, args: string[], what: string) =>
    run('ip', ['netns', 'exec', nsName(role), 'nft', ...args], `${what} in ${nsName(role)}`);
  const netns: Netns = {
    host,
    name: nsName,
    address: (role) => {
      nsName(role);
      return `10.231.${n}.${10 + roles.indexOf(role)}`;
    },
    async cut(role, ports, mode) {
      if (ports.length === 0) throw new Error('cut: no ports');
      await nft(role, ['add', 'element', 'inet', 'pbxfault', SETS[mode], `{ ${ports.join(', ')} }`], `cut ${mode}`);
    },
    async uncut(role, ports, mode) {
      await nft(role, ['delete', 'element', 'inet', 'pbxfault', SETS[mode], `{ ${ports.join(', ')} }`], 'uncut');
    },
    async cutPeers(role, addresses) {
      if (addresses.length === 0) throw new Error('cutPeers: no addresses');
      await nft(role, ['add', 'element', 'inet', 'pbxfault', 'peers', `{ ${addresses.join(', ')} }`], 'cut peers');
    },
    async heal(role) {
      for (const set of [...Object.values(SETS), 'peers'])
        await nft(role, ['flush', 'set', 'inet', 'pbxfault', set], 'heal');
    },
    probe: (role, port, timeoutMs = 2000, to = host) => probe(nsName(role), to, port, timeoutMs),
    describe: (role) => nft(role, ['list', 'table', 'inet', 'pbxfault'], 'listing cuts'),
    async destroy() {
      await removeNet(n);
      fs.rmSync(`${REGISTRY}/${n}`, { force: true });
    },
  };
  try {
    await run('ip', ['link', 'add', bridge, 'type', 'bridge'], 'adding the bridge');
    await run('ip', ['addr', 'add', `${host}/24`, 'dev', bridge], 'addressing the bridge');
    await run('ip', ['link', 'set', bridge, 'up'], 'raising the bridge');
    for (const [i, role] of roles.entries()) {
      const ns = nsName(role);
      const veth = `pb${n}v${i}`;
      await run('ip', ['netns', 'add', ns], `adding ${ns}`);
      await run('ip', ['link', 'add', veth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns], 'adding a veth');
      await run('ip', ['link', 'set', veth, 'master', bridge, 'up'], 'joining the veth to the bridge');
      await run('ip', ['-n', ns, 'link', 'set', 'lo', 'up'], 'raising lo');
      await run('ip', ['-n', ns, 'addr', 'add', `10.231.${n}.${10 + i}/24`, 'dev', 'eth0'], 'addressing eth0');
      await run('ip', ['-n', ns, 'link', 'set', 'eth0', 'up'], 'raising eth0');
      // A failed load would leave no table, and every later cut would silently do nothing: checked by run().
      await loadRuleset(ns, host);
    }
    return netns;
  } catch (cause) {
    await netns.destroy().catch(() => {});
    throw cause;
  }
}

async function loadRuleset(ns: string, host: string): Promise<void> {
  const file = `${REGISTRY}/${ns}.nft`;
  fs.writeFileSync(file, ruleset(host));
  try {
    await run('ip', ['netns', 'exec', ns, 'nft', '-f', file], `loading the fault table in ${ns}`);
  } finally {
    fs.rmSync(file, { force: true });
  }
}

const PROBE = `
const s = require('node:net').connect({ host: process.argv[1], port: Number(process.argv[2]) });
const t = setTimeout(() => { console.log('timeout'); process.exit(0); }, Number(process.argv[3]));
s.on('connect', () => { console.log('ok'); clearTimeout(t); s.destroy(); });
s.on('error', (e) => { console.log(e.code === 'ECONNREFUSED' || e.code === 'ECONNRESET' ? 'refused' : e.code); clearTimeout(t); });
`;

async function probe(ns: string, host: string, port: number, timeoutMs: number): Promise<'ok' | 'timeout' | 'refused'> {
  const out = await run(
    'ip',
    ['netns', 'exec', ns, process.execPath, '-e', PROBE, host, String(port), String(timeoutMs)],
    `probing ${host}:${port} from ${ns}`,
  );
  const result = out.trim();
  if (result !== 'ok' && result !== 'timeout' && result !== 'refused')
    throw new Error(`probe of ${host}:${port} from ${ns}: ${result}`);
  return result;
}
