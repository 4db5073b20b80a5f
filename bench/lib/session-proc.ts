// A devop session in a process of its own, started inside the pod netns (nsenter --net) by bench/steal.ts: it reaches
// the agent's control port over loopback (the tunnel, with no port-forward in it) and hands each stolen connection to a
// local command on 127.0.0.1:<appPort> (the bench passes the pod's own app, so the stolen and direct paths end at the
// same server and differ only by devop's path). Prints READY once stealing; SIGTERM ends it.
import { connectSession } from '../../test/agent/session-client.js';

const [agentPort, stealPort, appPort] = process.argv.slice(2).map(Number);
const session = await connectSession({ host: '127.0.0.1', port: agentPort }, { local: { port: appPort } });
const res = await session.subscribe(stealPort, 'steal');
if (res.type !== 'subscribed') throw new Error(`subscribe ${stealPort}: ${JSON.stringify(res)}`);
process.stdout.write('READY\n');
process.on('SIGTERM', () => {
  session.mux.close('bench over');
  process.exit(0);
});
