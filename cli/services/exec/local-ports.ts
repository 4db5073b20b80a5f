// The local ports the pod's traffic will go to must be free until the local command takes them.
import { UserError } from '../../../shared/errors.js';
import { canConnect } from '../../process/listen.js';
import type { PortMapping } from '../ports.js';

/**
 * A port that accepts connections before the local command started is another process's: "the local command listens"
 * would be true at once, `ready` would follow, and that process would get the pod's traffic.
 */
export async function refuseTakenPorts(ports: readonly PortMapping[]): Promise<void> {
  const taken = (await Promise.all(ports.map(async (p) => ((await canConnect(p.local)) ? p : undefined)))).filter(
    (p) => p !== undefined,
  );
  if (taken.length === 0) return;
  const where = taken.map((p) => `127.0.0.1:${p.local}`).join(', ');
  const remap = taken.map((p) => `-p ${p.remote}:<FREE PORT>`).join(' ');
  throw new UserError(
    `${where} already ${taken.length === 1 ? 'accepts' : 'accept'} connections from another process, before ` +
      'the local command started: the pod keeps its traffic',
    `stop that process (\`ss -ltnp\` names it), or map a free local port: ${remap}`,
  );
}
