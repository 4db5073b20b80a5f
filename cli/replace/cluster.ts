// `--replace` in the cluster: refuse what cannot be replaced (an HPA, a GitOps owner), take the workload's Lease, start
// the guard (with its own per-session account), scale the workload to 0 with its count recorded on it, run the copy
// pod — and restore it all afterwards.
import { randomBytes } from 'node:crypto';
import {
  BatchV1Api,
  CoreV1Api,
  CustomObjectsApi,
  PatchStrategy,
  RbacAuthorizationV1Api,
  setHeaderOptions,
  type KubeConfig,
  type V1Pod,
  type V1PodTemplateSpec,
  type V1DeleteOptions,
  type V1Role,
  type V1RoleBinding,
  type V1ServiceAccount,
} from '@kubernetes/client-node';
import { errorMessage, UserError } from '../../shared/errors.js';
import {
  REPLACE_ANNOTATIONS,
  REPLACE_LABELS,
  restorePatch,
  scaleDownPatch,
  workloadApiPath,
  type ReplaceKind,
  type ReplacedWorkload,
} from '../../shared/replace-contract.js';
import { assertAccess, type AccessCheck } from '../kube/access.js';
import { apiCall, apiErrorCode, mapApiError } from '../kube/errors.js';
import { buildCopyPod, buildGuardAccess, buildGuardJob, isOurGuardAccess, type GuardAccess } from './manifest.js';
import { ReplaceLease } from './lease.js';
import { chooseContainer, isPodReady, podState } from '../kube/target.js';

export const REPLACE_KINDS: Record<ReplaceKind, { group: string; version: string; plural: string; kind: string }> = {
  deployment: { group: 'apps', version: 'v1', plural: 'deployments', kind: 'Deployment' },
  statefulset: { group: 'apps', version: 'v1', plural: 'statefulsets', kind: 'StatefulSet' },
  rollout: { group: 'argoproj.io', version: 'v1alpha1', plural: 'rollouts', kind: 'Rollout' },
};
/** Between reads of the guard's and the copy's pod while they start. */
const POD_POLL_MS = 500;
/** A workload annotated so says its GitOps sync is paused for the session: --replace may scale it. */
export const GITOPS_PAUSED_ANNOTATION = 'devop.dev/gitops-paused';

interface WorkloadObject extends ReplacedWorkload {
  metadata?: ReplacedWorkload['metadata'] & { labels?: Record<string, string>; name?: string };
  spec?: ReplacedWorkload['spec'] & { template?: V1PodTemplateSpec; workloadRef?: unknown };
}

interface Hpa {
  metadata?: { name?: string };
  spec?: { scaleTargetRef?: { kind?: string; name?: string } };
}

/** Why a GitOps tool would undo the scale-down (it syncs replicas back from git), or undefined. Pure. */
export function gitOpsOwner(workload: WorkloadObject): string | undefined {
  const labels = workload.metadata?.labels ?? {};
  const annotations = workload.metadata?.annotations ?? {};
  if (annotations[GITOPS_PAUSED_ANNOTATION] === 'true') return undefined;
  if (annotations['kustomize.toolkit.fluxcd.io/reconcile'] === 'disabled') return undefined;
  const argo = labels['argocd.argoproj.io/instance'] ?? annotations['argocd.argoproj.io/tracking-id']?.split(':')[0];
  if (argo) return `the Argo CD Application "${argo}"`;
  const flux = labels['kustomize.toolkit.fluxcd.io/name'] ?? labels['helm.toolkit.fluxcd.io/name'];
  if (flux) return `the Flux ${labels['kustomize.toolkit.fluxcd.io/name'] ? 'Kustomization' : 'HelmRelease'} "${flux}"`;
  return undefined;
}

/** The HPA that scales this workload, if one does. Pure. */
export function scalingHpa(hpas: Hpa[], kind: ReplaceKind, name: string): string | undefined {
  const hpa = hpas.find(
    (h) => h.spec?.scaleTargetRef?.kind === REPLACE_KINDS[kind].kind && h.spec.scaleTargetRef.name === name,
  );
  return hpa?.metadata?.name;
}

/** What a replace needs beside a session's own rights: the workload, the copy, the lock, the guard and its access. */
export function replaceAccessChecks(namespace: string, kind: ReplaceKind): AccessCheck[] {
  const { group, plural } = REPLACE_KINDS[kind];
  const check = (verb: string, g: string, resource: string): AccessCheck => ({ verb, group: g, resource, namespace });
  return [
    check('get', group, plural),
    check('patch', group, plural),
    check('create', '', 'pods'),
    check('delete', '', 'pods'),
    check('create', 'coordination.k8s.io', 'leases'),
    check('update', 'coordination.k8s.io', 'leases'),
    check('create', 'batch', 'jobs'),
    // The guard Job starts suspended and is resumed once its account exists; a restore deletes it.
    check('patch', 'batch', 'jobs'),
    check('delete', 'batch', 'jobs'),
    check('create', '', 'serviceaccounts'),
    check('create', 'rbac.authorization.k8s.io', 'roles'),
    check('create', 'rbac.authorization.k8s.io', 'rolebindings'),
  ];
}

export interface ReplaceInput {
  kc: KubeConfig;
  namespace: string;
  kind: ReplaceKind;
  name: string;
  /** /container/NAME of the target, if given. */
  container?: string;
  /** --steal: the copy keeps the workload's labels, so its Services send it their traffic. */
  keepLabels: boolean;
  agentImage: string;
  user: string;
  host: string;
  startupTimeoutMs: number;
  onWarning: (message: string) => void;
}

export interface Replacement {
  /** The copy pod and its container, as a target (`pod/NAME/container/NAME`). */
  target: string;
  copyPod: string;
  originalReplicas: number;
  /** Gives the workload its replicas back, deletes the copy, the guard and the Lease. Safe to call twice. */
  restore(): Promise<void>;
}

/** Replaces a workload: the session then targets the returned copy. Restores what it did when a step fails. */
export async function startReplace(input: ReplaceInput): Promise<Replacement> {
  const { kc, namespace, kind, name } = input;
  const api = kc.makeApiClient(CustomObjectsApi);
  const ref = { ...REPLACE_KINDS[kind], namespace, name };
  const what = `${kind}/${name}`;
  const ctx = { action: `read ${what}`, verb: 'get', resource: `${ref.plural}.${ref.group}`, namespace, name };
  // The RBAC preflight runs beside the reads: a denial is named in one line before anything is changed.
  const access = assertAccess(
    kc,
    replaceAccessChecks(namespace, kind),
    kc.getCurrentUser()?.name ?? 'the current user',
  );
  const reads = Promise.all([
    apiCall(ctx, () => api.getNamespacedCustomObject(ref) as Promise<WorkloadObject>),
    (
      api.listNamespacedCustomObject({
        group: 'autoscaling',
        version: 'v2',
        plural: 'horizontalpodautoscalers',
        namespace,
      }) as Promise<{ items?: Hpa[] }>
    ).catch((err: unknown) => {
      // A cluster without the autoscaling/v2 API has no HPA to fear; another failure is reported as such.
      if (apiErrorCode(err) === 404) return { items: [] };
      throw mapApiError(err, { ...ctx, action: 'list the HPAs', verb: 'list', resource: 'horizontalpodautoscalers' });
    }),
  ]);
  const [allowed, read] = await Promise.allSettled([access, reads]);
  if (allowed.status === 'rejected') throw allowed.reason;
  if (read.status === 'rejected') throw read.reason;
  const [workload, hpas] = read.value;
  const hpa = scalingHpa(hpas.items ?? [], kind, name);
  if (hpa)
    throw new UserError(
      `${what} is scaled by the HorizontalPodAutoscaler "${hpa}": ` +
        'it would scale the workload up again while it is replaced',
      `delete the HPA for the session (kubectl get hpa ${hpa} -o yaml > hpa.yaml; kubectl delete hpa ${hpa}), ` +
        'or run without --replace',
    );
  const gitops = gitOpsOwner(workload);
  if (gitops)
    throw new UserError(
      `${what} is managed by ${gitops}, which would sync its replicas back while it is replaced`,
      `pause its sync, then annotate the workload: kubectl annotate ${kind} ${name} ${GITOPS_PAUSED_ANNOTATION}=true`,
    );
  const template = workload.spec?.template;
  if (!template?.spec)
    throw new UserError(
      `${what} has no pod template (a Rollout with workloadRef?)`,
      'replace the workload it refers to',
    );
  const { container } = chooseContainer({ metadata: template.metadata, spec: template.spec } as V1Pod, input.container);

  const run = randomBytes(4).toString('hex');
  const identity = `${input.user}@${input.host}#${run}`;
  const owner = `${input.user}@${input.host}`;
  const copyPod = `${name.slice(0, 40).replace(/-+$/, '')}-devop-replace-${run}`;
  const guardJob = `devop-replace-guard-${run}`;
  const lease = new ReplaceLease({ kc, namespace, workload: { kind, name }, identity, onTrouble: input.onWarning });
  await lease.take();

  const core = kc.makeApiClient(CoreV1Api);
  const batch = kc.makeApiClient(BatchV1Api);
  /** The guard's access objects that are this session's, RoleBinding first (the order of their deletion). */
  const accessUids: GuardAccessObject[] = [];
  let restored = false;
  let originalReplicas = 0;
  const restore = async (): Promise<void> => {
    if (restored) return;
    restored = true;
    const steps: [string, () => Promise<unknown>][] = [
      [`restore the replicas of ${what}`, () => restoreReplicas(api, ref, identity)],
      [`delete the copy pod ${copyPod}`, () => core.deleteNamespacedPod({ name: copyPod, namespace })],
      [
        `delete the guard Job ${guardJob}`,
        () => batch.deleteNamespacedJob({ name: guardJob, namespace, propagationPolicy: 'Background' }),
      ],
      // Owned by the Job, so garbage collection removes them too; deleted here so that none waits for it. Only what
      // this session created or confirmed as its own (by uid): a foreign object under the same name is not touched.
      ...accessUids.map(({ kind: k, name: n, uid, remove }): [string, () => Promise<unknown>] => [
        `delete the guard's ${k} ${n}`,
        () => remove({ preconditions: { uid } }),
      ]),
    ];
    for (const [action, call] of steps) {
      await call().catch((err: unknown) => {
        if (apiErrorCode(err) === 404) return;
        input.onWarning(
          `could not ${action} (${errorMessage(err)}): ` +
            'the guard does it once the replace lock expires, or run `devop clean`',
        );
      });
    }
    await lease.release();
  };

  try {
    const job = buildGuardJob({
      name: guardJob,
      namespace,
      workload: { kind, name, path: workloadApiPath(kind, namespace, name) },
      lease: lease.name,
      holder: identity,
      copyPod,
      agentImage: input.agentImage,
      owner,
    });
    const created = await apiCall(
      { action: 'create the guard Job', verb: 'create', resource: 'jobs.batch', namespace, name: guardJob },
      () => batch.createNamespacedJob({ namespace, body: job }),
    );
    const access = buildGuardAccess({
      name: guardJob,
      namespace,
      session: run,
      workload: { group: ref.group, resource: ref.plural, name },
      copyPod,
      lease: lease.name,
      jobUid: created.metadata?.uid ?? '',
    });
    await ensureGuardAccess(kc, namespace, access, (o) => accessUids.unshift(o));
    // Suspended until now: its pod runs as an account that exists, with its Role bound.
    await apiCall(
      { action: 'start the guard Job', verb: 'patch', resource: 'jobs.batch', namespace, name: guardJob },
      () =>
        batch.patchNamespacedJob(
          { name: guardJob, namespace, body: { spec: { suspend: false } } },
          setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
        ),
    );
    const body = buildCopyPod({
      name: copyPod,
      namespace,
      workload: { kind, name },
      template,
      container: container.name,
      keepLabels: input.keepLabels,
      agentImage: input.agentImage,
      owner,
    });
    // The copy starts while devop waits for the guard: nothing is scaled before both run.
    await apiCall({ action: 'create the copy pod', verb: 'create', resource: 'pods', namespace, name: copyPod }, () =>
      core.createNamespacedPod({ namespace, body }),
    );
    // The guard runs before anything is scaled: from here on a dead devop is undone in the cluster.
    await waitForPod(namespace, {
      what: `the guard of this session (Job ${guardJob})`,
      timeoutMs: input.startupTimeoutMs,
      read: async () =>
        (
          await core.listNamespacedPod({
            namespace,
            labelSelector: `${REPLACE_LABELS.role}=guard,${REPLACE_LABELS.of}=${name}`,
          })
        ).items.find((p) => p.metadata?.ownerReferences?.some((o) => o.name === guardJob)),
      done: (p) => Boolean(p.status?.containerStatuses?.[0]?.state?.running),
    });
    originalReplicas = await apiCall(
      { action: `scale ${what} to 0`, verb: 'patch', resource: ctx.resource, namespace, name },
      () => scaleDown(api, ref, identity, copyPod),
    );
    await waitForPod(namespace, {
      what: `the copy pod ${copyPod}`,
      timeoutMs: input.startupTimeoutMs,
      read: () => core.readNamespacedPod({ name: copyPod, namespace }),
      done: isPodReady,
    });
  } catch (err) {
    await restore();
    throw err;
  }
  return { target: `pod/${copyPod}/container/${container.name}`, copyPod, originalReplicas, restore };
}

/**
 * Scales the workload to 0 with its count recorded, on a fresh read (its status changes all the time: a patch made on
 * an older read is refused with 409, then read again). Returns the recorded count.
 */
async function scaleDown(
  api: CustomObjectsApi,
  ref: { group: string; version: string; plural: string; namespace: string; name: string },
  holder: string,
  copyPod: string,
): Promise<number> {
  for (let attempt = 0; ; attempt++) {
    const current = (await api.getNamespacedCustomObject(ref)) as WorkloadObject;
    const patch = scaleDownPatch(current, holder, copyPod) as { metadata: { annotations: Record<string, string> } };
    try {
      await api.patchNamespacedCustomObject(
        { ...ref, body: patch },
        setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
      );
      return Number(patch.metadata.annotations[REPLACE_ANNOTATIONS.replicas]);
    } catch (err) {
      if (apiErrorCode(err) !== 409 || attempt >= 4) throw err;
    }
  }
}

/** Applies the restore patch when the workload still carries this session's annotation (re-read on a conflict). */
export async function restoreReplicas(
  api: CustomObjectsApi,
  ref: { group: string; version: string; plural: string; namespace: string; name: string },
  holder?: string,
): Promise<number | undefined> {
  for (let attempt = 0; attempt < 5; attempt++) {
    const current = (await api.getNamespacedCustomObject(ref)) as WorkloadObject;
    const patch = restorePatch(current, holder) as { spec: { replicas: number } } | undefined;
    if (!patch) return undefined;
    try {
      await api.patchNamespacedCustomObject(
        { ...ref, body: patch },
        setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
      );
      return patch.spec.replicas;
    } catch (err) {
      if (apiErrorCode(err) !== 409) throw err;
    }
  }
  throw new Error(`${ref.plural}/${ref.name} kept changing while devop restored it`);
}

/** One of the guard's access objects that is this session's, and how to delete it (with a uid precondition). */
export interface GuardAccessObject {
  kind: string;
  name: string;
  uid: string;
  remove: (options: V1DeleteOptions) => Promise<unknown>;
}

/**
 * Creates the guard's ServiceAccount, Role and RoleBinding. An object already there under one of these per-session
 * names is used only when it is this session's (isOurGuardAccess): anything else is refused, never trusted.
 */
export async function ensureGuardAccess(
  kc: KubeConfig,
  namespace: string,
  access: GuardAccess,
  onOurs: (object: GuardAccessObject) => void,
): Promise<void> {
  const core = kc.makeApiClient(CoreV1Api);
  const rbac = kc.makeApiClient(RbacAuthorizationV1Api);
  type AccessObject = V1ServiceAccount | V1Role | V1RoleBinding;
  const create = async (
    expected: AccessObject,
    resource: string,
    call: () => Promise<AccessObject>,
    read: () => Promise<AccessObject>,
    remove: GuardAccessObject['remove'],
  ): Promise<void> => {
    const name = expected.metadata?.name ?? '';
    const ours = (o: AccessObject) => onOurs({ kind: expected.kind ?? '', name, uid: o.metadata?.uid ?? '', remove });
    try {
      ours(await call());
      return;
    } catch (err) {
      if (apiErrorCode(err) !== 409)
        throw mapApiError(err, { action: `create the guard's ${resource}`, verb: 'create', resource, namespace });
    }
    const found = await apiCall(
      { action: `read the guard's ${resource} ${name}`, verb: 'get', resource, namespace, name },
      read,
    );
    if (isOurGuardAccess(expected, found)) {
      ours(found);
      return;
    }
    throw new UserError(
      `a ${expected.kind} ${namespace}/${name} is already there and is not this session's ` +
        "(other labels, owner, rules or subjects): the guard's account would not be devop's alone",
      `run \`devop clean -n ${namespace}\` (it removes devop's leftovers), or delete it if it is not devop's ` +
        `(kubectl delete ${expected.kind?.toLowerCase()} -n ${namespace} ${name}), then run again`,
    );
  };
  const { account, role, binding } = access;
  const name = account.metadata?.name ?? '';
  await create(
    account,
    'serviceaccounts',
    () => core.createNamespacedServiceAccount({ namespace, body: account }),
    () => core.readNamespacedServiceAccount({ namespace, name }),
    (body) => core.deleteNamespacedServiceAccount({ namespace, name, body }),
  );
  await create(
    role,
    'roles.rbac.authorization.k8s.io',
    () => rbac.createNamespacedRole({ namespace, body: role }),
    () => rbac.readNamespacedRole({ namespace, name }),
    (body) => rbac.deleteNamespacedRole({ namespace, name, body }),
  );
  await create(
    binding,
    'rolebindings.rbac.authorization.k8s.io',
    () => rbac.createNamespacedRoleBinding({ namespace, body: binding }),
    () => rbac.readNamespacedRoleBinding({ namespace, name }),
    (body) => rbac.deleteNamespacedRoleBinding({ namespace, name, body }),
  );
}

/** Polls a pod until `done`; fails in one line when one of its containers cannot start, or at the timeout. */
async function waitForPod(
  namespace: string,
  input: { what: string; timeoutMs: number; read: () => Promise<V1Pod | undefined>; done: (pod: V1Pod) => boolean },
): Promise<void> {
  const deadline = Date.now() + input.timeoutMs;
  let pod: V1Pod | undefined;
  while (Date.now() < deadline) {
    pod = await input.read();
    if (pod && input.done(pod)) return;
    const statuses = [...(pod?.status?.initContainerStatuses ?? []), ...(pod?.status?.containerStatuses ?? [])];
    const failed = statuses.find((s) =>
      /ImagePull|ErrImage|CrashLoop|CreateContainer/.test(s.state?.waiting?.reason ?? ''),
    );
    if (pod && (failed || pod.status?.phase === 'Failed')) {
      const waiting = failed?.state?.waiting;
      const why = waiting
        ? `container ${failed?.name}: ${waiting.reason}${waiting.message ? `: ${waiting.message}` : ''}`
        : podState(pod);
      throw new UserError(
        `${input.what} cannot start (${why}): nothing was scaled`,
        `check its events: kubectl describe pod -n ${namespace} ${pod.metadata?.name}`,
      );
    }
    await new Promise((r) => setTimeout(r, POD_POLL_MS));
  }
  const state = pod ? podState(pod) : 'no pod yet';
  throw new UserError(
    `${input.what} does not run after ${input.timeoutMs / 1000} s (${state})`,
    `check its events (kubectl describe pod -n ${namespace} ${pod?.metadata?.name ?? ''}) ` +
      'or raise --startup-timeout',
  );
}
