// The `--replace` contract between the CLI and the in-cluster guard (agent image, `guard` mode): the annotations on a
// replaced workload — the source of truth for its original replica count —, the labels of the copy pod and the guard,
// the guard's env, and the one restore patch both sides apply. Changing a name here breaks guards already running.

export type ReplaceKind = 'deployment' | 'statefulset' | 'rollout';

/** Written on the workload in the same patch that scales it to 0, removed by the restore patch. */
export const REPLACE_ANNOTATIONS = {
  /** The replica count before the first replace: kept across sessions until a restore applies it. */
  replicas: 'devop.dev/replaced-replicas',
  /** The Lease holder identity (user@host#run) of the session that replaces it. */
  holder: 'devop.dev/replaced-by',
  /** The copy pod of that session. */
  copy: 'devop.dev/replace-copy',
} as const;

export const REPLACE_LABELS = {
  /** On the copy pod and the guard Job: the name of the replaced workload. */
  of: 'devop.dev/replace-of',
  /** copy or guard. */
  role: 'devop.dev/replace-role',
} as const;

/** The guard's env (set by the CLI's Job builder, read by agent/guard/replace-guard.ts). */
export const GUARD_ENV = {
  namespace: 'DEVOP_GUARD_NAMESPACE',
  /** API path of the workload, e.g. /apis/apps/v1/namespaces/ns/deployments/name. */
  workloadPath: 'DEVOP_GUARD_WORKLOAD_PATH',
  lease: 'DEVOP_GUARD_LEASE',
  holder: 'DEVOP_GUARD_HOLDER',
  copyPod: 'DEVOP_GUARD_COPY_POD',
  job: 'DEVOP_GUARD_JOB',
} as const;

/** The argument of the agent bundle (and agent/entry.sh) that runs the guard instead of the agent. */
export const GUARD_ARG = 'guard';

const API_PATHS: Record<ReplaceKind, { prefix: string; plural: string }> = {
  deployment: { prefix: '/apis/apps/v1', plural: 'deployments' },
  statefulset: { prefix: '/apis/apps/v1', plural: 'statefulsets' },
  rollout: { prefix: '/apis/argoproj.io/v1alpha1', plural: 'rollouts' },
};

export function workloadApiPath(kind: ReplaceKind, namespace: string, name: string): string {
  const { prefix, plural } = API_PATHS[kind];
  return `${prefix}/namespaces/${encodeURIComponent(namespace)}/${plural}/${encodeURIComponent(name)}`;
}

export interface ReplacedWorkload {
  metadata?: { annotations?: Record<string, string> | null; resourceVersion?: string };
  spec?: { replicas?: number | null };
}

/**
 * The merge patch that scales a workload to 0 for `holder`: the recorded count stays when one is there already (a
 * session that died before its restore), so the original count is never overwritten by 0. Pure.
 */
export function scaleDownPatch(workload: ReplacedWorkload, holder: string, copyPod: string): object {
  const recorded = workload.metadata?.annotations?.[REPLACE_ANNOTATIONS.replicas];
  const replicas = recorded ?? String(workload.spec?.replicas ?? 1);
  return {
    metadata: {
      ...(workload.metadata?.resourceVersion ? { resourceVersion: workload.metadata.resourceVersion } : {}),
      annotations: {
        [REPLACE_ANNOTATIONS.replicas]: replicas,
        [REPLACE_ANNOTATIONS.holder]: holder,
        [REPLACE_ANNOTATIONS.copy]: copyPod,
      },
    },
    spec: { replicas: 0 },
  };
}

/**
 * The merge patch that gives a workload its recorded replica count back and removes the annotations, or undefined when
 * there is nothing to restore (already restored: restores are idempotent) or when `holder` is given and another
 * session replaces it now. Pure.
 */
export function restorePatch(workload: ReplacedWorkload, holder?: string): object | undefined {
  const annotations = workload.metadata?.annotations ?? {};
  const recorded = annotations[REPLACE_ANNOTATIONS.replicas];
  if (recorded === undefined) return undefined;
  if (holder !== undefined && annotations[REPLACE_ANNOTATIONS.holder] !== holder) return undefined;
  const replicas = Number(recorded);
  return {
    metadata: {
      ...(workload.metadata?.resourceVersion ? { resourceVersion: workload.metadata.resourceVersion } : {}),
      annotations: {
        [REPLACE_ANNOTATIONS.replicas]: null,
        [REPLACE_ANNOTATIONS.holder]: null,
        [REPLACE_ANNOTATIONS.copy]: null,
      },
    },
    spec: { replicas: Number.isInteger(replicas) && replicas >= 0 ? replicas : 1 },
  };
}
