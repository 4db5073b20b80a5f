// Receiving end of the tunnel benchmark, run in its own process as a server is: a raw TCP sink that reads everything a
// connection sends and answers one byte when the sender half-closes. Every path of the bench ends here. On a second
// port it keeps connections for many transfers: each is an 8-byte big-endian length and that many bytes, answered
// with one byte once read (a connection that stays warm between transfers, as devop's tunnel does). On a third port it
// is the source of a download: a connection sends an 8-byte big-endian length and gets that many bytes, then the end.
//   node sink.mjs [<address>]   prints {"port":<port>,"counted":<port>,"source":<port>} on stdout; listens on
//   127.0.0.1 unless told
import net from 'node:net';

const ACK = Buffer.from([1]);
const host = process.argv[2] ?? '127.0.0.1';

const server = net.createServer({ allowHalfOpen: true }, (sock) => {
  sock.on('data', () => undefined);
  sock.on('end', () => sock.end(ACK));
  // A sender that gives up mid-transfer is the bench's to report, not the sink's.
  sock.on('error', () => sock.destroy());
});

const counted = net.createServer((sock) => {
  let header = Buffer.alloc(0);
  let left = -1; // bytes of the current transfer still to read; -1 while its length is read
  sock.on('data', (chunk: Buffer) => {
    let at = 0;
    while (at < chunk.length) {
      if (left < 0) {
        const need = 8 - header.length;
        header = Buffer.concat([header, chunk.subarray(at, at + need)]);
        at += Math.min(need, chunk.length - at);
        if (header.length === 8) {
          left = Number(header.readBigUInt64BE(0));
          header = Buffer.alloc(0);
        }
      } else {
        const n = Math.min(left, chunk.length - at);
        left -= n;
        at += n;
      }
      if (left === 0) {
        left = -1;
        sock.write(ACK);
      }
    }
  });
  sock.on('error', () => sock.destroy());
});

const BLOCK = Buffer.alloc(256 * 1024, 0xa5);
const source = net.createServer((sock) => {
  let header = Buffer.alloc(0);
  const onData = (chunk: Buffer): void => {
    header = Buffer.concat([header, chunk]);
    if (header.length < 8) return;
    sock.off('data', onData);
    let left = Number(header.readBigUInt64BE(0));
    const send = (): void => {
      while (left > 0) {
        const n = Math.min(left, BLOCK.length);
        left -= n;
        if (!sock.write(n === BLOCK.length ? BLOCK : BLOCK.subarray(0, n))) {
          sock.once('drain', send);
          return;
        }
      }
      sock.end();
    };
    send();
  };
  sock.on('data', onData);
  sock.on('error', () => sock.destroy());
});

let listening = 0;
const ready = (): void => {
  if (++listening < 3) return;
  const port = (s: net.Server): number => (s.address() as net.AddressInfo).port;
  process.stdout.write(`${JSON.stringify({ port: port(server), counted: port(counted), source: port(source) })}\n`);
};
server.listen(0, host, ready);
counted.listen(0, host, ready);
source.listen(0, host, ready);
// The benchmark ends this process by closing our stdin.
process.stdin.resume();
process.stdin.on('end', () => process.exit(0));
