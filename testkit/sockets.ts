// Loopback sockets for suites and benches: a TCP port free right now, and the two connected ends of a real TCP
// connection (what a tunnel's two sides hold).
import { readFileSync } from 'node:fs';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';

/**
 * The lowest port the kernel hands out for a bind to port 0 and for outgoing connections (ip_local_port_range): a port
 * under it is taken only by a process that names it.
 */
function ephemeralLow(): number {
  try {
    return Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').split(/\s+/)[0]) || 32768;
  } catch {
    return 32768;
  }
}

function listensOn(port: number): Promise<boolean> {
  return new Promise((resolveFree) => {
    const server = createServer();
    server.once('error', () => resolveFree(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolveFree(true)));
  });
}

/**
 * A TCP port free on 127.0.0.1 right now (for a listener the suite starts next), under the ephemeral range: one from
 * that range (a bind to port 0) could be taken, between this check and its use, by any listener on port 0 or outgoing
 * connection — devop's own outgoing proxy took the local command's port that way.
 */
export async function freePort(): Promise<number> {
  const low = ephemeralLow();
  const span = Math.min(12_000, low - 1024);
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = low - 1 - Math.floor(Math.random() * span);
    if (await listensOn(port)) return port;
  }
  throw new Error(`no free port under ${low} on 127.0.0.1 after 100 tries`);
}

/**
 * The two ends of one loopback TCP connection: [the connecting side, the accepted side]. Both are destroyed by a
 * function pushed onto `cleanups` (the suite runs them after each test).
 */
export async function socketPair(
  cleanups: Array<() => void>,
  options: { allowHalfOpen?: boolean } = {},
): Promise<[Socket, Socket]> {
  const allowHalfOpen = options.allowHalfOpen ?? false;
  const server = createServer({ allowHalfOpen });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const accepted = new Promise<Socket>((r) => server.once('connection', r));
  const client = connect({ port: (server.address() as AddressInfo).port, host: '127.0.0.1', allowHalfOpen });
  const serverSide = await accepted;
  server.close();
  cleanups.push(() => {
    client.destroy();
    serverSide.destroy();
  });
  return [client, serverSide];
}
