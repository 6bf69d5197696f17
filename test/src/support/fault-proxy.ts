import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * A small TCP proxy for fault tests (this machine has no toxiproxy, and its kernel no netem). It forwards between clients and
 * one upstream and can add latency, cut every connection, refuse or black-hole new ones, and forward a request
 * while dropping its reply — the peer acted, the caller never hears: an unknown outcome. Replies are recognised
 * by the protocol the proxy is told it carries:
 * - kafka: replies to Produce requests (the broker appended the records);
 * - postgres: a CommandComplete whose tag matches (e.g. /^COMMIT/: the transaction committed).
 * A dropped reply cuts that connection (both sides reset), as a network failure right after the peer acted.
 *
 * For Kafka put the proxy in front of a broker whose advertised listener is the proxy's port, so metadata sends
 * every client back through it and nothing needs rewriting.
 */
export type ProxyProtocol = 'raw' | 'kafka' | 'postgres';

export interface DropRule {
  /** Replies to drop, one connection cut each. */
  count: number;
  /** postgres: which CommandComplete tags. @defaultValue /^COMMIT/ */
  tag?: RegExp;
}

export interface FaultProxyOptions {
  upstream: { host: string; port: number };
  protocol?: ProxyProtocol;
  /** @defaultValue 0: a free port */
  port?: number;
}

export interface ProxyStats {
  connections: number;
  open: number;
  dropped: number;
  cuts: number;
}

interface Pipe {
  client: net.Socket;
  server: net.Socket;
  /** Client → server bytes not yet framed (kafka: to learn which requests are Produce). */
  up: Buffer;
  /** Server → client bytes held until their frame is complete. */
  down: Buffer;
  produce: Set<number>;
  upQueue: Promise<void>;
  downQueue: Promise<void>;
  dead: boolean;
}

export class FaultProxy {
  readonly #options: Required<Omit<FaultProxyOptions, 'port'>>;
  readonly #server: net.Server;
  readonly #pipes = new Set<Pipe>();
  #latencyMs = 0;
  #mode: 'forward' | 'refuse' | 'blackhole' = 'forward';
  #drop: (DropRule & { left: number }) | null = null;
  #stats: ProxyStats = { connections: 0, open: 0, dropped: 0, cuts: 0 };
  port = 0;

  private constructor(options: FaultProxyOptions) {
    this.#options = { upstream: options.upstream, protocol: options.protocol ?? 'raw' };
    this.#server = net.createServer((client) => this.#accept(client));
  }

  static async start(options: FaultProxyOptions): Promise<FaultProxy> {
    const proxy = new FaultProxy(options);
    await new Promise<void>((resolve, reject) => {
      proxy.#server.once('error', reject);
      proxy.#server.listen(options.port ?? 0, '127.0.0.1', () => resolve());
    });
    proxy.port = (proxy.#server.address() as net.AddressInfo).port;
    return proxy;
  }

  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  /** Delay added to every chunk, each direction, order kept. */
  setLatency(ms: number): void {
    this.#latencyMs = ms;
  }

  /**
   * forward: normal; refuse: new connections are reset at once (a server that is down); blackhole: new
   * connections are accepted and nothing is forwarded either way (a partition: calls hang).
   */
  setMode(mode: 'forward' | 'refuse' | 'blackhole'): void {
    this.#mode = mode;
  }

  /** Resets every open connection now. */
  cut(): void {
    for (const pipe of this.#pipes) this.#kill(pipe);
  }

  /** Drops the next `rule.count` matching replies, each cutting its connection (count 0: stop dropping). */
  dropReplies(rule: DropRule): void {
    if (this.#options.protocol === 'raw') throw new Error('dropReplies needs protocol kafka or postgres');
    this.#drop = rule.count > 0 ? { ...rule, left: rule.count } : null;
  }

  /** Replies still to drop under the current rule. */
  dropsLeft(): number {
    return this.#drop?.left ?? 0;
  }

  stats(): ProxyStats {
    return { ...this.#stats, open: this.#pipes.size };
  }

  async close(): Promise<void> {
    this.cut();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #accept(client: net.Socket): void {
    this.#stats.connections++;
    if (this.#mode === 'refuse') {
      client.on('error', () => {});
      client.resetAndDestroy();
      return;
    }
    const server = net.connect(this.#options.upstream);
    const pipe: Pipe = {
      client,
      server,
      up: Buffer.alloc(0),
      down: Buffer.alloc(0),
      produce: new Set(),
      upQueue: Promise.resolve(),
      downQueue: Promise.resolve(),
      dead: false,
    };
    this.#pipes.add(pipe);
    const blackhole = this.#mode === 'blackhole';
    client.on('data', (chunk: Buffer) => {
      if (blackhole || pipe.dead) return;
      if (this.#options.protocol === 'kafka') this.#learnRequests(pipe, chunk);
      pipe.upQueue = this.#later(pipe.upQueue, () => {
        if (!pipe.dead) server.write(chunk);
      });
    });
    server.on('data', (chunk: Buffer) => {
      if (blackhole || pipe.dead) return;
      const out = this.#options.protocol === 'raw' ? chunk : this.#filterReplies(pipe, chunk);
      if (out === null) return;
      pipe.downQueue = this.#later(pipe.downQueue, () => {
        if (!pipe.dead && out.length > 0) client.write(out);
      });
    });
    const end = () => this.#kill(pipe);
    for (const s of [client, server]) {
      s.on('error', end);
      s.on('close', end);
    }
  }

  #later(queue: Promise<void>, write: () => void): Promise<void> {
    const delay = this.#latencyMs;
    return delay > 0 ? queue.then(() => sleep(delay)).then(write) : queue.then(write);
  }

  #kill(pipe: Pipe): void {
    if (pipe.dead) return;
    pipe.dead = true;
    this.#pipes.delete(pipe);
    this.#stats.cuts++;
    // A reset (RST) where the connection is open, as a network failure; a plain destroy otherwise.
    for (const s of [pipe.client, pipe.server]) {
      if (s.destroyed) continue;
      if (s.readyState === 'open') s.resetAndDestroy();
      else s.destroy();
    }
  }

  /** Kafka request frames: int32 size, int16 api key, int16 version, int32 correlation id. Produce is key 0. */
  #learnRequests(pipe: Pipe, chunk: Buffer): void {
    pipe.up = pipe.up.length ? Buffer.concat([pipe.up, chunk]) : chunk;
    while (pipe.up.length >= 4) {
      const size = pipe.up.readInt32BE(0);
      if (pipe.up.length < 4 + size) break;
      if (size >= 8 && pipe.up.readInt16BE(4) === 0) pipe.produce.add(pipe.up.readInt32BE(8));
      pipe.up = pipe.up.subarray(4 + size);
    }
  }

  /**
   * Forwards complete reply frames, holding a partial one until it completes. A frame matching the drop rule is
   * not forwarded and its connection is cut (returns null). Kafka frames: int32 size, int32 correlation id;
   * PostgreSQL messages: 1 type byte, int32 length (self-inclusive).
   */
  #filterReplies(pipe: Pipe, chunk: Buffer): Buffer | null {
    pipe.down = pipe.down.length ? Buffer.concat([pipe.down, chunk]) : chunk;
    let at = 0;
    const kafka = this.#options.protocol === 'kafka';
    for (;;) {
      const rest = pipe.down.length - at;
      const head = kafka ? 4 : 5;
      if (rest < head) break;
      const length = kafka ? 4 + pipe.down.readInt32BE(at) : 1 + pipe.down.readInt32BE(at + 1);
      if (rest < length) break;
      if (this.#matches(pipe, pipe.down.subarray(at, at + length))) {
        const forward = pipe.down.subarray(0, at);
        this.#stats.dropped++;
        this.#drop!.left--;
        if (this.#drop!.left <= 0) this.#drop = null;
        // What came before the dropped reply still reaches the client; then the connection is cut.
        pipe.downQueue = this.#later(pipe.downQueue, () => {
          if (!pipe.dead && forward.length > 0) pipe.client.write(forward, () => this.#kill(pipe));
          else this.#kill(pipe);
        });
        pipe.down = Buffer.alloc(0);
        return null;
      }
      at += length;
    }
    const out = pipe.down.subarray(0, at);
    pipe.down = pipe.down.subarray(at);
    return out;
  }

  #matches(pipe: Pipe, frame: Buffer): boolean {
    if (this.#options.protocol === 'kafka') {
      if (frame.length < 8) return false;
      const id = frame.readInt32BE(4);
      if (!pipe.produce.delete(id)) return false;
      return this.#drop !== null;
    }
    if (this.#drop === null || frame[0] !== 0x43) return false; // 'C' CommandComplete
    const tag = frame.subarray(5, frame.length - 1).toString('utf8');
    return (this.#drop.tag ?? /^COMMIT/).test(tag);
  }
}
