// The CLI side of devop's tunnel for bench/tunnel.ts, in a process of its own as `devop port-forward` is: a local
// listener whose connections become `outgoing` streams on a mux over one TCP connection to the agent side
// (bench/lib/tunnel-agent.ts), with the CLI's own code (startForwards, createMuxDialer). Bundled, run with plain node.
//   node tunnel-cli.mjs <agent port> <target port>   prints {"port":<local listener>} on stdout
import { connect } from 'node:net';
import { once } from 'node:events';
import { createClientMux } from '../../shared/mux.js';
import { createMuxDialer } from '../../cli/outgoing/mux-dialer.js';
import { startForwards } from '../../cli/services/port-forward.js';
import { NullReporter } from '../../cli/ui/null.js';

const [agentPort, targetPort] = process.argv.slice(2).map(Number);
const socket = connect({ host: '127.0.0.1', port: agentPort });
await once(socket, 'connect');
const mux = createClientMux(socket);
mux.on('close', () => process.exit(0));
const forward = { localPort: 0, host: '127.0.0.1', port: targetPort, spec: `127.0.0.1:${targetPort}` };
const { ports } = await startForwards(createMuxDialer(mux), [forward], '127.0.0.1', new NullReporter());
process.stdout.write(`${JSON.stringify({ port: ports[0] })}\n`);
// The benchmark ends this process by closing our stdin.
process.stdin.resume();
process.stdin.on('end', () => process.exit(0));
