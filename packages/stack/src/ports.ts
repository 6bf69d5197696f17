import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { StackError } from './errors.ts';

export interface HostPort {
  host: string;
  port: number;
}

export function formatAddress({ host, port }: HostPort): string {
  return `${host}:${port}`;
}

/** True when something accepts a TCP connection: used to tell "free" from "taken", not "ready". */
export function canConnect({ host, port }: HostPort, timeoutMs = 1000): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    const done = (open: boolean) => {
      socket.destroy();
      resolve(open);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

/**
 * Sends `request` on a fresh connection and resolves with the reply once it holds `lines` CRLF-terminated lines.
 * Enough for line protocols (a Redis PING) without pulling in a client library.
 */
export function exchange(address: HostPort, request: string, lines = 1, timeoutMs = 2000): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(address);
    let reply = '';
    socket.setEncoding('utf8');
    socket.setTimeout(timeoutMs, () => {
      socket.destroy();
      reject(new Error(`no reply from ${formatAddress(address)} within ${timeoutMs} ms`));
    });
    socket.once('connect', () => socket.write(request));
    socket.on('data', (chunk: string) => {
      reply += chunk;
      if (reply.split('\r\n').length > lines) {
        socket.destroy();
        resolve(reply);
      }
    });
    socket.once('error', (err) => {
      socket.destroy();
      reject(err);
    });
    socket.once('end', () => resolve(reply));
  });
}

export interface WaitOptions {
  /** What is being waited for, for the error message. */
  what: string;
  /** Appended to the timeout message: where to look next (usually "read <log file>"). */
  hint: string;
  timeoutMs: number;
  intervalMs?: number;
  /**
   * Returns a reason when waiting is pointless (the process died), so a crash is reported at once instead of
   * after the whole timeout.
   */
  gaveUp?: () => Promise<string | undefined>;
}

/** Retries `probe` until it resolves; a probe signals "not yet" by throwing. */
export async function waitUntil<T>(probe: () => Promise<T>, options: WaitOptions): Promise<T> {
  const deadline = Date.now() + options.timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      return await probe();
    } catch (err) {
      lastError = err;
    }
    const reason = await options.gaveUp?.();
    if (reason !== undefined) {
      throw new StackError('start_failed', `${options.what}: ${reason}; ${options.hint}`, { cause: lastError });
    }
    if (Date.now() >= deadline) {
      throw new StackError(
        'start_timeout',
        `${options.what}: no answer within ${Math.round(options.timeoutMs / 1000)} s; ${options.hint}`,
        { cause: lastError },
      );
    }
    await sleep(options.intervalMs ?? 250);
  }
}

/** Ports handed out by this process: never the same one twice, though a server may not have bound it yet. */
const handedOut = new Set<number>();

/**
 * A port for a private server, below the kernel's ephemeral range (32768–60999 here): a port the kernel picks
 * (`listen(0)`) comes from that range, so an outgoing connection could take it again between this check and the
 * server's own bind — that race once failed a test with "port … is in use by a process Postbox did not start".
 * A port below the range is only taken by a server that asks for it. Checked free by binding it.
 */
export async function freePort(): Promise<number> {
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    if (handedOut.has(port)) continue;
    if (await canBind(port)) {
      handedOut.add(port);
      return port;
    }
  }
  throw new Error('no free port between 20000 and 31999 after 100 tries');
}

function canBind(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}
