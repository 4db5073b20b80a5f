// Receiving end of the tunnel benchmark, run in its own process as a server is: a raw TCP sink that reads everything a
// connection sends and answers one byte when the sender half-closes. Every path of the bench ends here.
//   node sink.mjs   prints {"port":<port>} on stdout
import net from 'node:net';

const ACK = Buffer.from([1]);

const server = net.createServer({ allowHalfOpen: true }, (sock) => {
  sock.on('data', () => undefined);
  sock.on('end', () => sock.end(ACK));
  // A sender that gives up mid-transfer is the bench's to report, not the sink's.
  sock.on('error', () => sock.destroy());
});
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`${JSON.stringify({ port: (server.address() as net.AddressInfo).port })}\n`);
});
// The benchmark ends this process by closing our stdin.
process.stdin.resume();
process.stdin.on('end', () => process.exit(0));
