// A devop session in a process of its own, started inside the pod netns (nsenter --net) by bench/steal.ts: it reaches
// the agent's control port — and its native data path's, when given — through the CLI's own connect (cli/session/
// connect.ts: one pods/portforward WebSocket, cli/kube/tunnel.ts) to the relay at 127.0.0.1:<relayPort>
// (bench/lib/portforward-relay.ts, the stand-in's port-forward), and hands each stolen connection to a local command on
// 127.0.0.1:<appPort> with the CLI's own handler (cli/services/incoming.ts). The bench passes the pod's own app as the
// local command, so the stolen and direct paths end at the same server. Prints READY once stealing; SIGTERM ends it.
//   node session-proc.mjs <relayPort> <agentPort>[:<nativePort>] <stealPort>[,<stealPort>…] <appPort>
// Prints "STREAMS <n>" whenever the number of incoming streams open reaches another hundred (not at 0: with a new
// connection per request the count goes 0 → 1 → 0 each time, and a line per connection would be a pipe write and a
// wake-up of the bench that the CLI does not make).
import { randomUUID } from 'node:crypto';
import { FEATURES, type AgentMessage } from '../../shared/protocol.js';
import { clientIdentity, connectAgent } from '../../cli/session/connect.js';
import { incomingStreamHandler } from '../../cli/services/incoming.js';
import { relayKubeConfig } from './relay-kubeconfig.js';

const [relayPort, appPort] = [2, 5].map((i) => Number(process.argv[i]));
const [agentPort, nativePort] = process.argv[3].split(':').map(Number);
const stealPorts = process.argv[4].split(',').map(Number);
const kc = relayKubeConfig(relayPort);
const token = process.env.DEVOP_AGENT_TOKEN ?? 'test-token';
const agent = {
  mode: 'job' as const,
  name: 'bench',
  agentPod: 'bench',
  agentNamespace: 'bench',
  agentContainer: 'agent',
  port: agentPort,
  ...(nativePort ? { nativePort } : {}),
  token,
  agentId: 'bench',
  reused: true,
};
// As the CLI does, minus the display: the connections' events are made from their streams (stream-events) and dropped.
const features = [FEATURES.traffic, FEATURES.streamEvents, FEATURES.nativeSplice];
const { mux } = await connectAgent(kc, agent, undefined, {
  deadline: Date.now() + 10_000,
  identity: clientIdentity(),
  features,
});
const ports = stealPorts.map((remote) => ({ remote, local: appPort }));
const handle = incomingStreamHandler({ ports, onError: (m) => console.error(m), onConnection: () => undefined });
let open = 0;
const count = (delta: number): void => {
  open += delta;
  if (open > 0 && open % 100 === 0) process.stdout.write(`STREAMS ${open}\n`);
};
mux.on('stream', (stream) => {
  count(1);
  stream.once('close', () => count(-1));
  handle(stream);
});
mux.on('message', (msg: AgentMessage) => {
  if (msg.type === 'ping') mux.send({ type: 'pong', id: msg.id, sentAt: msg.sentAt }); // as the CLI's supervisor does
});
mux.on('close', () => process.exit(0));
for (const port of stealPorts) {
  const id = `sub-${randomUUID()}`;
  const reply = new Promise<AgentMessage>((resolve) => {
    const onMessage = (msg: AgentMessage): void => {
      if ('id' in msg && msg.id === id) {
        mux.off('message', onMessage);
        resolve(msg);
      }
    };
    mux.on('message', onMessage);
  });
  mux.send({ type: 'subscribe', id, port, mode: 'steal', flush: false, stealProbes: false });
  const res = await reply;
  if (res.type !== 'subscribed') throw new Error(`subscribe ${port}: ${JSON.stringify(res)}`);
}
process.stdout.write('READY\n');
process.on('SIGTERM', () => {
  mux.close('bench over');
  process.exit(0);
});
