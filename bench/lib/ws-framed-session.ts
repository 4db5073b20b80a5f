// The session side of bench/steal.ts's floor (bench/lib/ws-framed-pair.c) written in Node with the CLI's own tunnel:
// one pods/portforward WebSocket (cli/kube/tunnel.ts, client-node's ws) to the relay, carrying the C agent side's
// [u32 id | u32 length | bytes] frames (length 0: the connection closed); the first frame of an id dials the app. No
// mux, no credit, no streams: against the C session it shows what Node and ws cost, against devop's session what the
// mux and its streams add. Bundled, run with plain node in the pod's netns; prints READY once the WebSocket is open.
//   node ws-framed-session.mjs <relay port> <agent tunnel port> <app port>
import { connect, type Socket } from 'node:net';
import { openPortForward } from '../../cli/kube/tunnel.js';
import { relayKubeConfig } from './relay-kubeconfig.js';

const [relayPort, tunnelPort, appPort] = process.argv.slice(2, 5).map(Number);
const kc = relayKubeConfig(relayPort);
const tunnel = await openPortForward(kc, { namespace: 'bench', pod: 'floor', port: tunnelPort });
tunnel.on('error', (err) => {
  console.error(`ws-framed-session: ${err.message}`);
  process.exit(1);
});
tunnel.on('end', () => process.exit(0));

const HEADER = 8;
const conns = new Map<number, Socket>();

function send(id: number, data?: Buffer): void {
  const frame = Buffer.allocUnsafe(HEADER + (data?.length ?? 0));
  frame.writeUInt32BE(id, 0);
  frame.writeUInt32BE(data?.length ?? 0, 4);
  data?.copy(frame, HEADER);
  tunnel.write(frame);
}

function onFrame(id: number, data: Buffer): void {
  const conn = conns.get(id);
  if (conn) {
    if (data.length > 0) conn.write(data);
    else {
      conns.delete(id); // closed over there: nothing to tell back
      conn.destroy();
    }
    return;
  }
  if (data.length === 0) return; // a connection this side already closed
  const socket = connect({ host: '127.0.0.1', port: appPort, noDelay: true });
  conns.set(id, socket);
  socket.write(data);
  socket.on('data', (chunk: Buffer) => send(id, chunk));
  socket.on('error', () => socket.destroy());
  socket.on('close', () => {
    if (conns.get(id) !== socket) return;
    conns.delete(id);
    send(id);
  });
}

let pending: Buffer = Buffer.alloc(0);
tunnel.on('data', (chunk: Buffer) => {
  let buf = pending.length > 0 ? Buffer.concat([pending, chunk]) : chunk;
  while (buf.length >= HEADER) {
    const length = buf.readUInt32BE(4);
    if (buf.length < HEADER + length) break;
    onFrame(buf.readUInt32BE(0), buf.subarray(HEADER, HEADER + length));
    buf = buf.subarray(HEADER + length);
  }
  pending = buf;
});
process.stdout.write('READY\n');
process.on('SIGTERM', () => process.exit(0));
