// What devop may have left in the cluster, as the API serves it: agent Jobs and pods, the pods they serve (for
// ephemeral agent containers and gone targets), steal Leases — listed in one namespace or all, and removed one by one.
import {
  BatchV1Api,
  CoordinationV1Api,
  CoreV1Api,
  type KubeConfig,
  type V1Job,
  type V1Lease,
  type V1Pod,
} from '@kubernetes/client-node';
import { AGENT_LABELS } from '../../shared/agent-contract.js';
import { apiCall, apiErrorCode } from './errors.js';
import { LEASE_LABEL, LEASE_LABEL_VALUE } from './steal-lease.js';

export type LeftoverKind = 'job' | 'pod' | 'ephemeral' | 'lease';

export interface DevopObjects {
  jobs: V1Job[];
  agentPods: V1Pod[];
  /** Every pod (the targets of agents, and the pods that hold ephemeral agent containers). */
  pods: V1Pod[];
  leases: V1Lease[];
}

const AGENT_SELECTOR = `${AGENT_LABELS.name}=${AGENT_LABELS.nameValue}`;

/** Lists devop's objects in `namespace`, or in every namespace when it is undefined. */
export async function listDevopObjects(kc: KubeConfig, namespace: string | undefined): Promise<DevopObjects> {
  const batch = kc.makeApiClient(BatchV1Api);
  const core = kc.makeApiClient(CoreV1Api);
  const coordination = kc.makeApiClient(CoordinationV1Api);
  const where = namespace ?? 'all namespaces';
  const ctx = (verb: string, resource: string) => ({
    action: `list ${resource} in ${where}`,
    verb,
    resource,
    namespace,
  });
  const leaseSelector = `${LEASE_LABEL}=${LEASE_LABEL_VALUE}`;
  const [jobs, agentPods, pods, leases] = await Promise.all([
    apiCall(ctx('list', 'jobs.batch'), () =>
      namespace
        ? batch.listNamespacedJob({ namespace, labelSelector: AGENT_SELECTOR })
        : batch.listJobForAllNamespaces({ labelSelector: AGENT_SELECTOR }),
    ),
    apiCall(ctx('list', 'pods'), () =>
      namespace
        ? core.listNamespacedPod({ namespace, labelSelector: AGENT_SELECTOR })
        : core.listPodForAllNamespaces({ labelSelector: AGENT_SELECTOR }),
    ),
    apiCall(ctx('list', 'pods'), () =>
      namespace ? core.listNamespacedPod({ namespace }) : core.listPodForAllNamespaces(),
    ),
    (namespace
      ? coordination.listNamespacedLease({ namespace, labelSelector: leaseSelector })
      : coordination.listLeaseForAllNamespaces({ labelSelector: leaseSelector })
    ).catch((err: unknown) => {
      // Without permission to read leases there are none of ours to clean: say nothing rather than fail the rest.
      if (apiErrorCode(err) === 403 || apiErrorCode(err) === 404) return { items: [] as V1Lease[] };
      return apiCall(ctx('list', 'leases.coordination.k8s.io'), () => Promise.reject(err));
    }),
  ]);
  return { jobs: jobs.items, agentPods: agentPods.items, pods: pods.items, leases: leases.items };
}

const RESOURCES: Record<LeftoverKind, string> = {
  job: 'jobs.batch',
  pod: 'pods',
  lease: 'leases.coordination.k8s.io',
  ephemeral: 'pods',
};

/** Deletes one object (already gone counts as deleted). Ephemeral containers cannot be deleted: nothing is done. */
export async function deleteLeftover(
  kc: KubeConfig,
  item: { kind: LeftoverKind; namespace: string; name: string },
): Promise<void> {
  const { namespace, name } = item;
  const ignoreGone = (err: unknown): void => {
    if (apiErrorCode(err) !== 404) throw err;
  };
  const context = {
    action: `delete ${item.kind} ${name}`,
    verb: 'delete',
    resource: RESOURCES[item.kind],
    namespace,
    name,
  };
  await apiCall(context, async () => {
    switch (item.kind) {
      case 'job':
        // Background propagation: the garbage collector removes the Job's pods after it.
        await kc
          .makeApiClient(BatchV1Api)
          .deleteNamespacedJob({ name, namespace, propagationPolicy: 'Background' })
          .catch(ignoreGone);
        return;
      case 'pod':
        await kc
          .makeApiClient(CoreV1Api)
          .deleteNamespacedPod({ name, namespace, gracePeriodSeconds: 0 })
          .catch(ignoreGone);
        return;
      case 'lease':
        await kc.makeApiClient(CoordinationV1Api).deleteNamespacedLease({ name, namespace }).catch(ignoreGone);
        return;
      case 'ephemeral':
        return;
    }
  });
}
