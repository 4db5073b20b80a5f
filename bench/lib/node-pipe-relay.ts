// A reference for bench/tunnel.ts: a plain Node relay with no framing at all, each accepted connection joined to a new
// connection to <target port> with socket.pipe() both ways. Two of these in a row are the most any two-process relay
// written in Node can move on the machine: the bench times them next to devop's pair. Bundled, run with plain node.
//   node node-pipe-relay.mjs <target port>   prints {"port":<listener>} on stdout
import net from 'node:net';

const target = Number(process.argv[2]);
const server = net.createServer({ allowHalfOpen: true }, (inbound) => {
  const outbound = net.connect({ port: target, host: '127.0.0.1', allowHalfOpen: true });
  // pipe() ends its destination when its source ends: with allowHalfOpen that is a half-close, carried on as sent.
  inbound.pipe(outbound);
  outbound.pipe(inbound);
  // A broken leg ends the other (the bench reports a transfer that did not finish); a leg that closed after both
  // half-closes needs nothing, and destroying the other then could drop its last bytes.
  inbound.on('error', () => outbound.destroy());
  outbound.on('error', () => inbound.destroy());
});
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`${JSON.stringify({ port: (server.address() as net.AddressInfo).port })}\n`);
});
// The benchmark ends this process by closing our stdin.
process.stdin.resume();
process.stdin.on('end', () => process.exit(0));
