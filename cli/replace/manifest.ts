// What `--replace` creates, as pure functions: the copy of the workload's pod (its template, the chosen container's
// command replaced by a waiter from the agent image), the guard Job that restores the workload if devop dies, and the
// per-session service account, Role and RoleBinding that let the guard do exactly that, owned by the guard Job.
import type {
  V1Container,
  V1Job,
  V1Pod,
  V1PodTemplateSpec,
  V1Role,
  V1RoleBinding,
  V1ServiceAccount,
} from '@kubernetes/client-node';
import { AGENT_ENTRYPOINT, AGENT_LABELS } from '../../shared/agent-contract.js';
import { GUARD_ARG, GUARD_ENV, REPLACE_LABELS, type ReplaceKind } from '../../shared/replace-contract.js';

/** Where the init container puts the static busybox of the agent image, in the copy's containers. */
const WAITER_DIR = '/devop-replace';
const WAITER_VOLUME = 'devop-replace';
/** In the agent image (Dockerfile.agent). */
const IMAGE_BUSYBOX = '/opt/devop/busybox';
/**
 * The copy's waiting process: a shell that exits on TERM (as PID 1 a process without a handler ignores it, and the pod
 * would take its whole grace period to stop) and otherwise sleeps.
 */
export const WAITER_COMMAND: readonly string[] = [
  `${WAITER_DIR}/busybox`,
  'sh',
  '-c',
  `trap 'kill $! 2>/dev/null; exit 0' TERM INT; while :; do ${WAITER_DIR}/busybox sleep 3600 & wait $!; done`,
];
/** The init container's user: nobody in particular (distroless images' "nonroot"). */
const WAITER_USER = 65532;
const WAITER_SECURITY = {
  runAsUser: WAITER_USER,
  runAsGroup: WAITER_USER,
  runAsNonRoot: true,
  allowPrivilegeEscalation: false,
  readOnlyRootFilesystem: true,
  capabilities: { drop: ['ALL'] },
  seccompProfile: { type: 'RuntimeDefault' },
};
/**
 * On the guard's ServiceAccount, Role and RoleBinding: `devop clean` finds them by these labels (with the managed-by
 * one), and a 409 on create is trusted only when the object carries this session's values.
 */
export const GUARD_ACCESS_LABELS = {
  /** The random run id of the session (its guard Job, copy pod and access objects carry it in their names too). */
  session: 'devop.dev/replace-session',
  roleValue: 'guard-access',
} as const;
/** Labels controllers put on a workload's pods: the copy must not carry them, or it would be adopted and deleted. */
const CONTROLLER_LABELS = [
  'pod-template-hash',
  'rollouts-pod-template-hash',
  'controller-revision-hash',
  'statefulset.kubernetes.io/pod-name',
  'apps.kubernetes.io/pod-index',
];

export interface CopyPodInput {
  name: string;
  namespace: string;
  workload: { kind: ReplaceKind; name: string };
  template: V1PodTemplateSpec;
  /** The container whose command is replaced (the one the local command stands in for). */
  container: string;
  /** Keep the workload's labels, so that its Services send their traffic to the copy. */
  keepLabels: boolean;
  agentImage: string;
  owner: string;
}

function waiting(container: V1Container): V1Container {
  const {
    livenessProbe: _liveness,
    readinessProbe: _readiness,
    startupProbe: _startup,
    lifecycle: _lifecycle,
    ...rest
  } = container;
  // No probes: nothing listens in the copy (its traffic goes to the local command), and no hooks run its binaries.
  return {
    ...rest,
    command: [...WAITER_COMMAND],
    args: [],
    volumeMounts: [...(container.volumeMounts ?? []), { name: WAITER_VOLUME, mountPath: WAITER_DIR, readOnly: true }],
  };
}

/** The copy pod: the template's spec with a waiter in place of the chosen container's command. Pure. */
export function buildCopyPod(input: CopyPodInput): V1Pod {
  const spec = input.template.spec;
  if (!spec) throw new Error('the workload has no pod template spec');
  const templateLabels = { ...(input.template.metadata?.labels ?? {}) };
  for (const label of CONTROLLER_LABELS) delete templateLabels[label];
  const ours = {
    [AGENT_LABELS.managedBy]: AGENT_LABELS.managedByValue,
    [REPLACE_LABELS.of]: input.workload.name,
    [REPLACE_LABELS.role]: 'copy',
  };
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: input.name,
      namespace: input.namespace,
      labels: input.keepLabels ? { ...templateLabels, ...ours } : ours,
      annotations: {
        ...(input.template.metadata?.annotations ?? {}),
        'devop.dev/replace-of': `${input.workload.kind}/${input.workload.name}`,
        'devop.dev/owner': input.owner,
      },
    },
    spec: {
      ...spec,
      initContainers: [
        {
          name: 'devop-replace-waiter',
          image: input.agentImage,
          command: [IMAGE_BUSYBOX, 'cp', IMAGE_BUSYBOX, `${WAITER_DIR}/busybox`],
          volumeMounts: [{ name: WAITER_VOLUME, mountPath: WAITER_DIR }],
          // Not root, no privileges: admitted under a template's runAsNonRoot and the restricted Pod Security level.
          securityContext: WAITER_SECURITY,
        },
        ...(spec.initContainers ?? []),
      ],
      containers: spec.containers.map((c) => (c.name === input.container ? waiting(c) : c)),
      volumes: [...(spec.volumes ?? []), { name: WAITER_VOLUME, emptyDir: {} }],
    },
  };
}

export interface GuardJobInput {
  /** The Job's name, which its ServiceAccount, Role and RoleBinding share. */
  name: string;
  namespace: string;
  workload: { kind: ReplaceKind; name: string; path: string };
  lease: string;
  holder: string;
  copyPod: string;
  agentImage: string;
  owner: string;
}

/**
 * The guard Job: the agent image in `guard` mode. It restarts on failure (it is what restores the workload) and
 * deletes itself once it has restored. It is created suspended: its ServiceAccount, Role and RoleBinding are owned by
 * it (they need its uid), and its pod may only start once they exist.
 */
export function buildGuardJob(input: GuardJobInput): V1Job {
  const labels = {
    [AGENT_LABELS.managedBy]: AGENT_LABELS.managedByValue,
    [REPLACE_LABELS.of]: input.workload.name,
    [REPLACE_LABELS.role]: 'guard',
  };
  const env: Record<keyof typeof GUARD_ENV, string> = {
    namespace: input.namespace,
    workloadPath: input.workload.path,
    lease: input.lease,
    holder: input.holder,
    copyPod: input.copyPod,
    job: input.name,
  };
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: {
      name: input.name,
      namespace: input.namespace,
      labels,
      annotations: {
        'devop.dev/replace-of': `${input.workload.kind}/${input.workload.name}`,
        'devop.dev/owner': input.owner,
      },
    },
    spec: {
      suspend: true,
      backoffLimit: 20,
      template: {
        metadata: { labels },
        spec: {
          serviceAccountName: input.name,
          restartPolicy: 'OnFailure',
          containers: [
            {
              name: 'devop-replace-guard',
              image: input.agentImage,
              command: [...AGENT_ENTRYPOINT],
              args: [GUARD_ARG],
              env: Object.entries(env).map(([key, value]) => ({
                name: GUARD_ENV[key as keyof typeof GUARD_ENV],
                value,
              })),
              // It only talks to the API server: the same unprivileged user as the waiter's copy.
              securityContext: WAITER_SECURITY,
            },
          ],
        },
      },
    },
  };
}

export interface GuardAccessInput {
  /** The guard Job's name: the ServiceAccount, Role and RoleBinding share it. */
  name: string;
  namespace: string;
  /** The session's run id (GUARD_ACCESS_LABELS.session). */
  session: string;
  /** The one workload the guard restores: its API group, resource (plural) and name. */
  workload: { group: string; resource: string; name: string };
  copyPod: string;
  lease: string;
  /** The guard Job, once created: the owner whose deletion (by the guard, devop or a user) removes all three. */
  jobUid: string;
}

export interface GuardAccess {
  account: V1ServiceAccount;
  role: V1Role;
  binding: V1RoleBinding;
}

/**
 * The guard's ServiceAccount, Role and RoleBinding for one session. The Role holds what agent/guard/replace-guard.ts
 * calls, each on the one object by name (docs/safety.md says why each rule is there); no create, list or watch
 * (resourceNames cannot narrow those). Owned by the guard Job, so garbage collection removes them with it. Pure.
 */
export function buildGuardAccess(input: GuardAccessInput): GuardAccess {
  const metadata = {
    name: input.name,
    namespace: input.namespace,
    labels: {
      [AGENT_LABELS.managedBy]: AGENT_LABELS.managedByValue,
      [REPLACE_LABELS.of]: input.workload.name,
      [REPLACE_LABELS.role]: GUARD_ACCESS_LABELS.roleValue,
      [GUARD_ACCESS_LABELS.session]: input.session,
    },
    ownerReferences: [{ apiVersion: 'batch/v1', kind: 'Job', name: input.name, uid: input.jobUid }],
  };
  return {
    account: { apiVersion: 'v1', kind: 'ServiceAccount', metadata },
    role: {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'Role',
      metadata,
      rules: [
        {
          apiGroups: [input.workload.group],
          resources: [input.workload.resource],
          resourceNames: [input.workload.name],
          verbs: ['get', 'patch'],
        },
        { apiGroups: [''], resources: ['pods'], resourceNames: [input.copyPod], verbs: ['delete'] },
        {
          apiGroups: ['coordination.k8s.io'],
          resources: ['leases'],
          resourceNames: [input.lease],
          verbs: ['get', 'delete'],
        },
        { apiGroups: ['batch'], resources: ['jobs'], resourceNames: [input.name], verbs: ['delete'] },
      ],
    },
    binding: {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata,
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: input.name },
      subjects: [{ kind: 'ServiceAccount', name: input.name, namespace: input.namespace }],
    },
  };
}

/**
 * A value as JSON with object keys sorted and empty values dropped: the API server answers in its own field order and
 * omits what is empty.
 */
function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => {
    if (v === null || (Array.isArray(v) && v.length === 0)) return undefined;
    if (typeof v !== 'object' || Array.isArray(v)) return v;
    return Object.fromEntries(Object.entries(v as object).sort(([a], [b]) => a.localeCompare(b)));
  });
}

/**
 * Whether an object found under one of the guard's names (a 409 on create) is this session's: same labels, owned by
 * this session's guard Job, and for the Role the same rules, for the RoleBinding the same Role and subjects. Anything
 * else may have been put there to widen what the guard's account can do, or to borrow it. Pure.
 */
export function isOurGuardAccess(
  expected: V1ServiceAccount | V1Role | V1RoleBinding,
  found: V1ServiceAccount | V1Role | V1RoleBinding,
): boolean {
  const labelsEqual = canonical(found.metadata?.labels ?? {}) === canonical(expected.metadata?.labels ?? {});
  const uid = expected.metadata?.ownerReferences?.[0]?.uid;
  const owned = (found.metadata?.ownerReferences ?? []).some((o) => o.kind === 'Job' && o.uid === uid);
  if (!labelsEqual || !owned) return false;
  if ('rules' in expected) return canonical((found as V1Role).rules) === canonical(expected.rules);
  if ('roleRef' in expected) {
    const binding = found as V1RoleBinding;
    return (
      canonical(binding.roleRef) === canonical(expected.roleRef) &&
      canonical(binding.subjects) === canonical(expected.subjects)
    );
  }
  return true;
}
