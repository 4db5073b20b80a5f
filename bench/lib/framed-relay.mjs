// A reference for bench/steal.ts: a framed relay pair in Node with nothing else in it (no flow control, no half-close,
// no checks). Not a floor of two-process tunnels: a pair written in C adds ~1/3 of its latency in the same harness.
// `entry` accepts connections and sends each one's bytes as [u32 length | u32 id | bytes] frames over one loopback
// connection to `exit`, which unframes them onto a connection of its own to the app, and
// back. Run inside the pod netns (nsenter --net); prints LISTENING.
//   node framed-relay.mjs exit  <listen port> <app port>
//   node framed-relay.mjs entry <listen port> <exit port>
import { createServer, connect } from 'node:net';

const [role, listenPort, toPort] = process.argv.slice(2);
const HEADER = 8;

function frame(id, bytes) {
  const out = Buffer.allocUnsafe(HEADER + bytes.length);
  out.writeUInt32BE(bytes.length, 0);
  out.writeUInt32BE(id, 4);
  bytes.copy(out, HEADER);
  return out;
}

/** Calls onFrame(id, bytes) for each whole frame in the connection's byte stream. */
function unframe(onFrame) {
  let held = Buffer.alloc(0);
  return (chunk) => {
    held = held.length > 0 ? Buffer.concat([held, chunk]) : chunk;
    while (held.length >= HEADER && held.length >= HEADER + held.readUInt32BE(0)) {
      const end = HEADER + held.readUInt32BE(0);
      onFrame(held.readUInt32BE(4), held.subarray(HEADER, end));
      held = held.subarray(end);
    }
  };
}

const listening = () => process.stdout.write('LISTENING\n');
if (role === 'entry') {
  const tunnel = connect({ host: '127.0.0.1', port: Number(toPort), noDelay: true });
  const clients = new Map();
  let nextId = 1;
  tunnel.on('data', unframe((id, bytes) => clients.get(id)?.write(bytes)));
  createServer({ noDelay: true }, (client) => {
    const id = nextId++;
    clients.set(id, client);
    client.on('data', (chunk) => tunnel.write(frame(id, chunk)));
    client.on('close', () => clients.delete(id));
    client.on('error', () => client.destroy());
  }).listen(Number(listenPort), '0.0.0.0', listening);
} else {
  createServer({ noDelay: true }, (tunnel) => {
    const upstreams = new Map();
    tunnel.on('data', unframe((id, bytes) => {
      let upstream = upstreams.get(id);
      if (!upstream) {
        upstream = connect({ host: '127.0.0.1', port: Number(toPort), noDelay: true });
        upstream.on('data', (chunk) => tunnel.write(frame(id, chunk)));
        upstream.on('error', () => upstream.destroy());
        upstreams.set(id, upstream);
      }
      upstream.write(bytes);
    }));
  }).listen(Number(listenPort), '127.0.0.1', listening);
}
process.on('SIGTERM', () => process.exit(0));
