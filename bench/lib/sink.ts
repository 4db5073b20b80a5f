// Receiving end of the tunnel benchmark, run in its own process: a raw TCP sink and a devop mux sink (agent side).
// Each counts what one connection/stream sends and answers one byte when the sender half-closes.
import net from 'node:net';
import { createAgentMux } from '../../shared/mux.js';

const ACK = Buffer.from([1]);

function listen(server: net.Server): Promise<number> {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as net.AddressInfo).port)));
}

/** Reads everything, then acknowledges the half-close with one byte. */
function sinkInto(stream: NodeJS.ReadWriteStream & { on(e: 'error', f: (err: Error) => void): unknown }): void {
  stream.on('data', () => undefined);
  stream.on('end', () => stream.end(ACK));
  stream.on('error', () => undefined);
}

async function main(): Promise<void> {
  const raw = net.createServer((sock) => sinkInto(sock));
  const mux = net.createServer((sock) => {
    sock.setNoDelay(true);
    const m = createAgentMux(sock);
    m.on('stream', (stream) => sinkInto(stream));
    m.on('close', () => sock.destroy());
  });
  const ports = { raw: await listen(raw), mux: await listen(mux) };
  process.stdout.write(`${JSON.stringify(ports)}\n`);
  // The benchmark ends this process by closing our stdin.
  process.stdin.resume();
  process.stdin.on('end', () => process.exit(0));
}

void main();
