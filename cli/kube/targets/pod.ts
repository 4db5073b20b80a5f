// pod/NAME: the pod itself (devop's own agent pods are never offered as targets).
import { AGENT_LABELS } from '../../../shared/agent-contract.js';
import type { V1Pod } from '@kubernetes/client-node';
import type { KindResolver } from './resolver.js';

/** devop's own agent pods are not targets. */
export function isAgentPod(pod: V1Pod): boolean {
  return pod.metadata?.labels?.[AGENT_LABELS.name] === AGENT_LABELS.nameValue;
}

export const podResolver: KindResolver = {
  plural: 'pods',
  resource: 'pods',
  async read({ core }, name, namespace) {
    return { kind: 'pod', pod: await core.readNamespacedPod({ name, namespace }) };
  },
  async names({ core }, namespace) {
    return (await core.listNamespacedPod({ namespace })).items
      .filter((p) => !isAgentPod(p))
      .map((p) => p.metadata?.name ?? '');
  },
};
