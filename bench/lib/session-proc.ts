// A devop session in a process of its own, started inside the pod netns (nsenter --net) by bench/steal.ts: it reaches
// the agent's control port over loopback (the tunnel, with no port-forward in it) and hands each stolen connection to a
// local command on 127.0.0.1:<appPort> with the CLI's own handler (cli/services/incoming.ts). The bench passes the pod's
// own app as the local command, so the stolen and direct paths end at the same server and differ only by devop's path.
// Prints READY once stealing; SIGTERM ends it.
import { once } from 'node:events';
import { connect } from 'node:net';
import { randomUUID } from 'node:crypto';
import { clientHello } from '../../shared/handshake.js';
import { createClientMux } from '../../shared/mux.js';
import type { AgentMessage } from '../../shared/protocol.js';
import { clientIdentity } from '../../cli/session/connect.js';
import { incomingStreamHandler } from '../../cli/services/incoming.js';

const [agentPort, stealPort, appPort] = process.argv.slice(2).map(Number);
const socket = connect({ host: '127.0.0.1', port: agentPort });
await once(socket, 'connect');
const mux = createClientMux(socket);
mux.on('stream', incomingStreamHandler({ ports: [{ remote: stealPort, local: appPort }], onError: (m) => console.error(m) }));
mux.on('message', (msg: AgentMessage) => {
  if (msg.type === 'ping') mux.send({ type: 'pong', id: msg.id, sentAt: msg.sentAt }); // as the CLI's supervisor does
});
mux.on('close', () => process.exit(0));
await clientHello(mux, { token: process.env.DEVOP_AGENT_TOKEN ?? 'test-token', client: clientIdentity(), features: ['traffic'] });
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
mux.send({ type: 'subscribe', id, port: stealPort, mode: 'steal', flush: false, stealProbes: false });
const res = await reply;
if (res.type !== 'subscribed') throw new Error(`subscribe ${stealPort}: ${JSON.stringify(res)}`);
process.stdout.write('READY\n');
process.on('SIGTERM', () => {
  mux.close('bench over');
  process.exit(0);
});
