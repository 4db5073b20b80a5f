// Whether a steal of an API extension (an APIService, webhook configurations) must take the node's connections too.
import { apiServerSource } from '../../kube/api-server-source.js';
import { info, type Reporter, warn } from '../../reporter.js';
import type { Session } from '../../session/connect.js';
import type { ExecServiceOptions } from './options.js';

/**
 * An extension target is called by the API server: when it connects from the pod's node address (a single-node
 * cluster), stealing must take the node's connections too, as --steal-probes does; else they are left to the pod.
 */
export async function extensionStealsNode(
  session: Session,
  options: Pick<ExecServiceOptions, 'mode'>,
  reporter: Reporter,
): Promise<boolean> {
  const target = session.target;
  const what = target?.extension
    ? `apiservice ${target.extension.name}`
    : target?.webhooks
      ? `${target.ref.kind} ${target.ref.name}`
      : undefined;
  if (!target || !what || options.mode !== 'steal') return false;
  const source = await apiServerSource(session.kc, target.pod);
  if (!source.known) {
    warn(
      reporter,
      `${what}: cannot tell where the API server connects from (${source.why}); connections from the node stay ` +
        "with the pod: add --steal-probes if the API server runs on the pod's node",
    );
    return false;
  }
  info(
    reporter,
    source.onPodNode
      ? `${what}: the API server connects from the node's address ${source.nodeIP}: connections from the node are ` +
          'taken too (kubelet probes with them: the local command answers them)'
      : `${what}: the API server connects from ${source.addresses.join(', ')}, not the node's address: ` +
          'kubelet probes stay with the pod',
  );
  return source.onPodNode;
}
