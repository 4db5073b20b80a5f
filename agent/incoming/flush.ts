// Moving existing connections off the app when stealing starts: what "flush" really does (docs/agent.md).
//
// Deleting conntrack entries alone does not move an ESTABLISHED TCP connection: the app's socket stays, and the
// client's next packet is picked up mid-stream as a new flow, REDIRECTed to the agent's listener, which has no such
// connection and answers with a reset. So the flush (1) aborts the app's established sockets on the port (ss -K: the
// kernel sends the client a RST at once and frees the app's socket) and (2) deletes the port's conntrack entries.
// Either way a keep-alive client sees its connection reset and its next connection is stolen.
import { run } from './tools.js';
import type { AgentLog } from '../log.js';

export async function flushConnections(port: number, log: AgentLog): Promise<void> {
  // The three programs run at once (the steal's answer waits for them): in whichever order each acts on a connection,
  // its client's next packet meets a reset, either from the aborted socket or from the listener the rule now sends it
  // to.
  const killing = run('ss', ['-K', '-H', '-t', 'state', 'established', `( sport = :${port} )`]).catch((err: Error) => ({
    code: 1,
    stdout: '',
    stderr: err.message,
  }));
  // conntrack reads one family per call (IPv4 unless told): both, for a dual-stack pod's IPv6 clients.
  const deleteFlows = (family: 'ipv4' | 'ipv6') =>
    run('conntrack', ['-D', '-f', family, '-p', 'tcp', '--orig-port-dst', String(port)]).catch((err: Error) => ({
      code: 1,
      stdout: '',
      stderr: err.message,
    }));
  const [killed, deleted, deleted6] = await Promise.all([killing, deleteFlows('ipv4'), deleteFlows('ipv6')]);
  const sockets = killed.stdout.split('\n').filter((l) => l.trim() !== '').length;
  // conntrack exits 1 when nothing matched; only its stderr says whether it really failed.
  const count = (r: { stderr: string }) => Number(/(\d+) flow entries have been deleted/.exec(r.stderr)?.[1] ?? '0');
  const flows = count(deleted) + count(deleted6);
  log.info('flushed existing connections', { port, sockets, conntrackFlows: flows, ssOk: killed.code === 0 });
}
