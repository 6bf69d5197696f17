import net from 'node:net';
import tls, { type ConnectionOptions } from 'node:tls';
import type { ISocketFactory } from 'kafkajs';

/** kafkajs's own keep-alive delay for broker connections. */
const KEEP_ALIVE_MS = 60_000;

/**
 * The sockets of one Kafka client, so that abandoning the client leaves nothing of it on the network. A client
 * disconnect ends its sockets gracefully: the kernel keeps retransmitting what it had queued — a produce request
 * sent into a partition — for as long as TCP retries (minutes), and a broker reached again appends it, long after
 * the relay gave the batch up and another relay sent it anew (faults.partition-relay). `cut()` resets every
 * connection instead (RST: the kernel drops what was queued) and refuses the client any new one, so a send the
 * relay abandoned at its deadline cannot land after that deadline.
 */
export class SocketFence {
  readonly #sockets = new Set<net.Socket>();
  #cut = false;

  /** The socket factory to give the kafkajs client (its default, with each raw TCP socket tracked). */
  readonly factory: ISocketFactory = ({ host, port, ssl, onConnect }) => {
    const raw = net.connect({ host, port });
    if (this.#cut) {
      raw.resetAndDestroy();
      return raw;
    }
    this.#sockets.add(raw);
    raw.once('close', () => this.#sockets.delete(raw));
    raw.setKeepAlive(true, KEEP_ALIVE_MS);
    if (!ssl) {
      raw.once('connect', onConnect);
      return raw;
    }
    const options: ConnectionOptions = {
      ...(net.isIP(host) ? {} : { servername: host }),
      ...(typeof ssl === 'object' ? ssl : {}),
      socket: raw,
    };
    const secure = tls.connect(options, onConnect);
    // The TLS socket kafkajs holds hears of a reset of the raw one late, if at all: it is ended with it.
    raw.once('close', () => secure.destroy());
    return secure;
  };

  /** Resets every connection of the client (discarding what the kernel still held to send) and any later one. */
  cut(): void {
    this.#cut = true;
    for (const socket of this.#sockets) socket.resetAndDestroy();
    this.#sockets.clear();
  }
}
