// The API server's part of the tunnel in bench/steal.ts: the stand-in's own pods/portforward WebSocket
// (standin/apiserver/streams.ts, v4.channel.k8s.io), each tunnel unwrapped onto a TCP connection to
// 127.0.0.1:<port> in the netns it runs in, as kubelet dials the pod's port. One process, one hop: a cluster has more
// (API server → kubelet → runtime), so this is the least a tunnel through the API server crosses.
//   node portforward-relay.mjs <listen port> [<cert file> <key file>]   (on 127.0.0.1; 0: any; with a certificate it
//   serves HTTPS, as an API server does)   prints LISTENING {"port":<port>}
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { createServer as createTlsServer } from 'node:https';
import { connect, type AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { createStreamServer, type NodeRuntime } from '../../standin/index.js';

const dialPod = async (_namespace: string, _pod: string, port: number): Promise<Duplex> => {
  const socket = connect({ host: '127.0.0.1', port, noDelay: true });
  await once(socket, 'connect');
  return socket;
};
const streams = createStreamServer(() => ({ dialPod }) as unknown as NodeRuntime);
const pod = { metadata: { name: 'bench', namespace: 'bench', uid: 'bench' } };
const [certFile, keyFile] = process.argv.slice(3, 5);
const notFound = (_req: unknown, res: { writeHead(code: number): { end(): void } }): void => res.writeHead(404).end();
const server = certFile
  ? createTlsServer({ cert: readFileSync(certFile), key: readFileSync(keyFile) }, notFound)
  : createServer(notFound);
server.on('upgrade', (req, socket, head) => {
  try {
    streams.upgradePortForward(req, socket, head, pod, new URL(req.url ?? '/', 'http://relay').searchParams);
  } catch (err) {
    console.error(`refused a tunnel: ${(err as Error).message}`);
    socket.destroy();
  }
});
server.listen(Number(process.argv[2]), '127.0.0.1', () =>
  process.stdout.write(`LISTENING ${JSON.stringify({ port: (server.address() as AddressInfo).port })}\n`),
);
process.on('SIGTERM', () => process.exit(0));
