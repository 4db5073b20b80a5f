// What devop may have left in the cluster, as the API serves it: agent Jobs and pods, the pods they serve (for
// ephemeral agent containers and gone targets), agents' token Secrets, steal Leases, what --replace sessions left
// (replaced workloads, copy pods, guard Jobs and their ServiceAccounts, Roles and RoleBindings, replace Leases) —
// listed in one namespace or all, and removed (a workload: restored) one by one.
import {
  BatchV1Api,
  CoordinationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  RbacAuthorizationV1Api,
  type KubeConfig,
  type V1Job,
  type V1Lease,
  type V1Pod,
  type V1Secret,
} from '@kubernetes/client-node';
import { AGENT_LABELS } from '../../shared/agent-contract.js';
import { apiCall, apiErrorCode } from '../kube/errors.js';
import { LEASE_LABEL, LEASE_LABEL_VALUE } from '../kube/steal-lease.js';
import { REPLACE_ANNOTATIONS, REPLACE_LABELS, type ReplaceKind } from '../../shared/replace-contract.js';
import { REPLACE_KINDS, restoreReplicas } from '../replace/cluster.js';
import { REPLACE_LEASE_LABEL_VALUE } from '../replace/lease.js';

/** workload: a replaced workload whose replicas `devop clean` restores. */
export type LeftoverKind =
  | 'job'
  | 'pod'
  | 'ephemeral'
  | 'lease'
  | 'workload'
  | 'secret'
  | 'serviceaccount'
  | 'role'
  | 'rolebinding';

export interface DevopObjects {
  jobs: V1Job[];
  agentPods: V1Pod[];
  /** Every pod (the targets of agents, and the pods that hold ephemeral agent containers). */
  pods: V1Pod[];
  leases: V1Lease[];
  /** Agents' token Secrets (a Job's goes with its Job; an ephemeral agent's with its session or its pod). */
  secrets: V1Secret[];
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
  const [jobs, agentPods, pods, leases, secrets] = await Promise.all([
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
    (namespace
      ? core.listNamespacedSecret({ namespace, labelSelector: AGENT_SELECTOR })
      : core.listSecretForAllNamespaces({ labelSelector: AGENT_SELECTOR })
    ).catch((err: unknown) => {
      // Without permission to list secrets: garbage collection still removes each with its Job or pod.
      if (apiErrorCode(err) === 403) return { items: [] as V1Secret[] };
      return apiCall(ctx('list', 'secrets'), () => Promise.reject(err));
    }),
  ]);
  return {
    jobs: jobs.items,
    agentPods: agentPods.items,
    pods: pods.items,
    leases: leases.items,
    secrets: secrets.items,
  };
}

/** A workload that carries the replace annotations. */
export interface ReplacedWorkloadItem {
  kind: ReplaceKind;
  namespace: string;
  name: string;
  annotations: Record<string, string>;
}

/** A ServiceAccount, Role or RoleBinding that devop made for a replace guard (labelled managed-by devop). */
export interface GuardAccessItem {
  kind: 'serviceaccount' | 'role' | 'rolebinding';
  namespace: string;
  name: string;
  labels: Record<string, string>;
}

export interface ReplaceObjects {
  workloads: ReplacedWorkloadItem[];
  leases: V1Lease[];
  copies: V1Pod[];
  guards: V1Job[];
  /** Guards' ServiceAccounts, Roles and RoleBindings (every one labelled managed-by devop: clean.ts picks). */
  access: GuardAccessItem[];
}

const RESOURCES: Record<LeftoverKind, string> = {
  job: 'jobs.batch',
  pod: 'pods',
  lease: 'leases.coordination.k8s.io',
  ephemeral: 'pods',
  workload: 'deployments.apps',
  secret: 'secrets',
  serviceaccount: 'serviceaccounts',
  role: 'roles.rbac.authorization.k8s.io',
  rolebinding: 'rolebindings.rbac.authorization.k8s.io',
};

/**
 * What `--replace` sessions left: workloads with the replace annotations (a kind the cluster does not serve has none),
 * replace Leases, copy pods and guard Jobs.
 */
export async function listReplaceObjects(kc: KubeConfig, namespace: string | undefined): Promise<ReplaceObjects> {
  const custom = kc.makeApiClient(CustomObjectsApi);
  const core = kc.makeApiClient(CoreV1Api);
  const batch = kc.makeApiClient(BatchV1Api);
  const coordination = kc.makeApiClient(CoordinationV1Api);
  const none = (err: unknown) => {
    // Not served (no StatefulSets or Rollouts API), or not allowed: nothing of that kind to restore.
    if (apiErrorCode(err) === 404 || apiErrorCode(err) === 403) return { items: [] };
    throw err;
  };
  type Listed = {
    items?: { metadata?: { name?: string; namespace?: string; annotations?: Record<string, string> } }[];
  };
  const workloads = await Promise.all(
    (Object.keys(REPLACE_KINDS) as ReplaceKind[]).map(async (kind) => {
      const { group, version, plural } = REPLACE_KINDS[kind];
      const list = (await (namespace
        ? custom.listNamespacedCustomObject({ group, version, plural, namespace })
        : custom.listClusterCustomObject({ group, version, plural })
      ).catch(none)) as Listed;
      return (list.items ?? [])
        .filter((o) => o.metadata?.annotations?.[REPLACE_ANNOTATIONS.replicas] !== undefined)
        .map(
          (o): ReplacedWorkloadItem => ({
            kind,
            namespace: o.metadata?.namespace ?? '',
            name: o.metadata?.name ?? '',
            annotations: o.metadata?.annotations ?? {},
          }),
        );
    }),
  );
  const role = (r: string) => `${REPLACE_LABELS.role}=${r}`;
  const leaseSelector = `${LEASE_LABEL}=${REPLACE_LEASE_LABEL_VALUE}`;
  const rbac = kc.makeApiClient(RbacAuthorizationV1Api);
  const managed = `${AGENT_LABELS.managedBy}=${AGENT_LABELS.managedByValue}`;
  const [leases, copies, guards, accounts, roles, bindings] = await Promise.all([
    (namespace
      ? coordination.listNamespacedLease({ namespace, labelSelector: leaseSelector })
      : coordination.listLeaseForAllNamespaces({ labelSelector: leaseSelector })
    ).catch(none),
    namespace
      ? core.listNamespacedPod({ namespace, labelSelector: role('copy') })
      : core.listPodForAllNamespaces({ labelSelector: role('copy') }),
    namespace
      ? batch.listNamespacedJob({ namespace, labelSelector: role('guard') })
      : batch.listJobForAllNamespaces({ labelSelector: role('guard') }),
    (namespace
      ? core.listNamespacedServiceAccount({ namespace, labelSelector: managed })
      : core.listServiceAccountForAllNamespaces({ labelSelector: managed })
    ).catch(none),
    (namespace
      ? rbac.listNamespacedRole({ namespace, labelSelector: managed })
      : rbac.listRoleForAllNamespaces({ labelSelector: managed })
    ).catch(none),
    (namespace
      ? rbac.listNamespacedRoleBinding({ namespace, labelSelector: managed })
      : rbac.listRoleBindingForAllNamespaces({ labelSelector: managed })
    ).catch(none),
  ]);
  type Meta = { metadata?: { name?: string; namespace?: string; labels?: Record<string, string> } };
  const items = (kind: GuardAccessItem['kind'], list: { items?: Meta[] }): GuardAccessItem[] =>
    (list.items ?? []).map((o) => ({
      kind,
      namespace: o.metadata?.namespace ?? '',
      name: o.metadata?.name ?? '',
      labels: o.metadata?.labels ?? {},
    }));
  return {
    workloads: workloads.flat(),
    leases: leases.items as V1Lease[],
    copies: copies.items.filter((p) => !p.metadata?.deletionTimestamp),
    guards: guards.items,
    access: [
      ...items('rolebinding', bindings as { items?: Meta[] }),
      ...items('role', roles as { items?: Meta[] }),
      ...items('serviceaccount', accounts as { items?: Meta[] }),
    ],
  };
}

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
      case 'secret':
        await kc.makeApiClient(CoreV1Api).deleteNamespacedSecret({ name, namespace }).catch(ignoreGone);
        return;
      case 'serviceaccount':
        await kc.makeApiClient(CoreV1Api).deleteNamespacedServiceAccount({ name, namespace }).catch(ignoreGone);
        return;
      case 'role':
        await kc.makeApiClient(RbacAuthorizationV1Api).deleteNamespacedRole({ name, namespace }).catch(ignoreGone);
        return;
      case 'rolebinding':
        await kc
          .makeApiClient(RbacAuthorizationV1Api)
          .deleteNamespacedRoleBinding({ name, namespace })
          .catch(ignoreGone);
        return;
      case 'ephemeral':
        return;
      case 'workload': {
        // name is KIND/NAME; the restore applies whichever session recorded the count.
        const [kind, workload] = name.split('/') as [ReplaceKind, string];
        const { group, version, plural } = REPLACE_KINDS[kind];
        await restoreReplicas(kc.makeApiClient(CustomObjectsApi), { group, version, plural, namespace, name: workload })
          .then(() => undefined)
          .catch(ignoreGone);
        return;
      }
    }
  });
}
