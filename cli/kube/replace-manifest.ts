// What `--replace` creates, as pure functions: the copy of the workload's pod (its template, the chosen container's
// command replaced by a waiter from the agent image), the guard Job that restores the workload if devop dies, and the
// service account and Role that let the guard do exactly that.
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
/** The guard's service account and Role (one per namespace, shared by every session there). */
export const GUARD_ACCOUNT = 'devop-replace-guard';
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
 * deletes itself once it has restored.
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
      backoffLimit: 20,
      template: {
        metadata: { labels },
        spec: {
          serviceAccountName: GUARD_ACCOUNT,
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

/** The guard's service account, Role (what a restore needs, nothing else) and RoleBinding in one namespace. */
export function buildGuardAccess(namespace: string): {
  account: V1ServiceAccount;
  role: V1Role;
  binding: V1RoleBinding;
} {
  const metadata = {
    name: GUARD_ACCOUNT,
    namespace,
    labels: { [AGENT_LABELS.managedBy]: AGENT_LABELS.managedByValue },
  };
  return {
    account: { apiVersion: 'v1', kind: 'ServiceAccount', metadata },
    role: {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'Role',
      metadata,
      rules: [
        { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['get', 'delete'] },
        { apiGroups: ['apps'], resources: ['deployments', 'statefulsets'], verbs: ['get', 'patch'] },
        { apiGroups: ['argoproj.io'], resources: ['rollouts'], verbs: ['get', 'patch'] },
        { apiGroups: [''], resources: ['pods'], verbs: ['delete'] },
        { apiGroups: ['batch'], resources: ['jobs'], verbs: ['delete'] },
      ],
    },
    binding: {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'RoleBinding',
      metadata,
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: GUARD_ACCOUNT },
      subjects: [{ kind: 'ServiceAccount', name: GUARD_ACCOUNT, namespace }],
    },
  };
}
