// The CLI side of devop's tunnel for bench/tunnel.ts, in a process of its own as `devop port-forward` is: a local
// listener whose connections become `outgoing` streams on a mux over one TCP connection to the agent side, with the
// CLI's own code (startForwards, createMuxDialer). With a token, the agent side is devop-splice and the connection
// joins it first (nativeJoin), as the CLI's native connection does; without, it is the agent's Node side
// (bench/lib/tunnel-agent.ts). Bundled, run with plain node.
//   node tunnel-cli.mjs <agent [host:]port> <target port> [<token>]   prints {"port":<local listener>} on stdout
// (the agent on 127.0.0.1 unless a host is given; the target is the agent side's 127.0.0.1)
//   node tunnel-cli.mjs ws:<relay port>:<agent port> <target port> <token>
// the same, with the tunnel the CLI opens in a cluster: a pods/portforward WebSocket (cli/kube/tunnel.ts, client-node's
// ws) to the stand-in's port-forward at 127.0.0.1:<relay port> (bench/lib/portforward-relay.ts), which dials the agent
// port on 127.0.0.1.
//   node tunnel-cli.mjs wss:<relay port>:<agent port>:<CA file> <target port> <token>
// the same over HTTPS, as to a cluster's API server: the relay serves TLS with a certificate of that CA. Either relay
// port may be <host>/<port>: the relay at that address (across bench:tunnel's 20 ms path) instead of 127.0.0.1.
import { connect } from 'node:net';
import { once } from 'node:events';
import type { Duplex } from 'node:stream';
import { createClientMux } from '../../shared/mux.js';
import type { AgentMessage } from '../../shared/protocol.js';
import { createMuxDialer } from '../../cli/outgoing/mux-dialer.js';
import { openPortForward } from '../../cli/kube/tunnel.js';
import { startForwards } from '../../cli/services/port-forward.js';
import { NullReporter } from '../../cli/ui/null.js';
import { relayKubeConfig } from './relay-kubeconfig.js';

async function openTunnel(at: string): Promise<Duplex> {
  if (at.startsWith('ws:') || at.startsWith('wss:')) {
    const [relayAt, port, caFile] = at.slice(at.indexOf(':') + 1).split(':');
    const [relayHost, relayPort] = relayAt.includes('/') ? relayAt.split('/') : [undefined, relayAt];
    const kc = relayKubeConfig(Number(relayPort), caFile, relayHost);
    return openPortForward(kc, { namespace: 'bench', pod: 'bench', port: Number(port) });
  }
  const [host, port] = at.includes(':') ? at.split(':') : ['127.0.0.1', at];
  const socket = connect({ host, port: Number(port) });
  await once(socket, 'connect');
  return socket;
}

const targetPort = Number(process.argv[3]);
const token = process.argv[4];
const mux = createClientMux(await openTunnel(process.argv[2]));
mux.on('close', () => process.exit(0));
if (token) {
  const answer = once(mux, 'message') as Promise<[AgentMessage]>;
  mux.send({ type: 'nativeJoin', token });
  const [joined] = await answer;
  if (joined.type !== 'nativeJoined') throw new Error(`devop-splice refused the join: ${JSON.stringify(joined)}`);
}
const forward = { localPort: 0, host: '127.0.0.1', port: targetPort, spec: `127.0.0.1:${targetPort}` };
// Joined, the connection is the native one, which takes every outgoing connection to an address (the bench's CLI side
// has no tunnel to the agent's Node side beside it).
const dialer = createMuxDialer(mux, token ? mux : undefined);
const { ports } = await startForwards(dialer, [forward], '127.0.0.1', new NullReporter());
process.stdout.write(`${JSON.stringify({ port: ports[0] })}\n`);
// The benchmark ends this process by closing our stdin.
process.stdin.resume();
process.stdin.on('end', () => process.exit(0));
