import net from 'node:net';

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
