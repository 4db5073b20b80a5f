// Loopback sockets for suites and benches: a TCP port free right now, and the two connected ends of a real TCP
// connection (what a tunnel's two sides hold).
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';

/** A TCP port free on 127.0.0.1 right now (for a listener the suite starts next). */
export async function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as AddressInfo).port;
      server.close(() => resolvePort(port));
    });
  });
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
