// What a namespace holds that a target can name, as `devop ls` shows it: deployments, statefulsets (none when the
// cluster does not serve them) and pods other than devop's own agents.
import {
  AppsV1Api,
  CoreV1Api,
  type KubeConfig,
  type V1Deployment,
  type V1Pod,
  type V1StatefulSet,
} from '@kubernetes/client-node';
import { apiCall, apiErrorCode } from './errors.js';
import { isAgentPod } from './targets/pod.js';

export interface Workloads {
  deployments: V1Deployment[];
  statefulsets: V1StatefulSet[];
  pods: V1Pod[];
}

export async function listWorkloads(kc: KubeConfig, namespace: string): Promise<Workloads> {
  const core = kc.makeApiClient(CoreV1Api);
  const apps = kc.makeApiClient(AppsV1Api);
  const ctx = (resource: string) => ({ action: `list ${resource}`, verb: 'list', resource, namespace });
  const [deployments, statefulsets, pods] = await Promise.all([
    apiCall(ctx('deployments.apps'), () => apps.listNamespacedDeployment({ namespace })),
    apps.listNamespacedStatefulSet({ namespace }).catch((err: unknown) => {
      if (apiErrorCode(err) === 404) return { items: [] };
      return apiCall(ctx('statefulsets.apps'), () => Promise.reject(err));
    }),
    apiCall(ctx('pods'), () => core.listNamespacedPod({ namespace })),
  ]);
  return {
    deployments: deployments.items,
    statefulsets: statefulsets.items,
    pods: pods.items.filter((pod) => !isAgentPod(pod)),
  };
}
