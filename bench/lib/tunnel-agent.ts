// The agent side of devop's tunnel for bench/tunnel.ts, in a process of its own as the agent is: accepts mux
// connections from bench/lib/tunnel-cli.ts and serves their `outgoing` streams with the agent's own code
// (serveOutgoing: dial the target, splice). Bundled; bench/tunnel.ts runs it as the agent runs (its image's node,
// its flags).
//   node tunnel-agent.mjs   prints {"port":<mux listener>} on stdout
import { createServer, type AddressInfo } from 'node:net';
import { createAgentMux } from '../../shared/mux.js';
import { serveOutgoing } from '../../agent/outgoing/connect.js';
import { createLog } from '../../agent/log.js';

const log = createLog('warn', (line) => process.stderr.write(`${line}\n`));
const server = createServer((socket) => {
  const mux = createAgentMux(socket);
  mux.on('stream', (stream) => {
    if (stream.open.kind === 'outgoing') void serveOutgoing(stream, stream.open.host, stream.open.port, undefined, log);
    else stream.reset(`bench agent serves outgoing streams only, not ${stream.open.kind}`);
  });
  mux.on('close', () => socket.destroy());
});
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`${JSON.stringify({ port: (server.address() as AddressInfo).port })}\n`);
});
// The benchmark ends this process by closing our stdin.
process.stdin.resume();
process.stdin.on('end', () => process.exit(0));
