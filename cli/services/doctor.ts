// `devop doctor`: checks what a session needs from the cluster — kubeconfig, API, RBAC, agent image, node runtime, Pod
// Security admission — and says, for each problem, how to fix it. Checks are independent: one failure does not hide
// others.
import { CoreV1Api, VersionApi, type KubeConfig, type V1Namespace } from '@kubernetes/client-node';
import { AGENT_CONTAINER_NAME, AGENT_LABELS } from '../../shared/agent-contract.js';
import { isUserError } from '../../shared/errors.js';
import { deniedChecks, describeCheck, type AccessCheck } from '../kube/access.js';
import { loadKubeConfig, type KubeAccessOptions } from '../kube/config.js';
import { apiErrorCode, apiErrorMessage, mapApiError } from '../kube/errors.js';
import { SESSION_DEFAULTS } from '../session/connect.js';
import { namesClusterScoped, resolveTarget } from '../kube/target.js';

export type CheckStatus = 'ok' | 'fail' | 'warn' | 'info';

export interface DoctorCheck {
  id: string;
  title: string;
  status: CheckStatus;
  detail: string;
  /** The fix, for fail and warn. */
  fix?: string;
}

export interface DoctorReport {
  ok: boolean;
  context?: string;
  namespace?: string;
  checks: DoctorCheck[];
}

export interface DoctorOptions extends KubeAccessOptions {
  namespace?: string;
  target?: string;
  agentImage?: string;
  agentNamespace?: string;
}

/** Permissions a session may need; `optional` ones only for some options (they warn instead of failing). */
export interface NeededPermission {
  check: AccessCheck;
  why: string;
  optional?: boolean;
}

export function neededPermissions(namespace: string, agentNamespace: string): NeededPermission[] {
  const p = (
    verb: string,
    group: string,
    resource: string,
    why: string,
    extra: Partial<AccessCheck> & { optional?: boolean } = {},
  ): NeededPermission => {
    const { optional, ...rest } = extra;
    return { check: { verb, group, resource, namespace, ...rest }, why, ...(optional ? { optional } : {}) };
  };
  return [
    p('get', '', 'pods', 'find the target pod'),
    p('list', '', 'pods', 'find the pods of a deployment/statefulset'),
    p('watch', '', 'pods', 'follow the target and wait for the agent'),
    p('create', '', 'pods', 'open the tunnel (port-forward) to the agent', { subresource: 'portforward' }),
    p('get', '', 'pods', "show a failed agent's last log lines", { subresource: 'log', namespace: agentNamespace }),
    p('create', 'batch', 'jobs', 'start the agent Job', { namespace: agentNamespace }),
    p('get', 'batch', 'jobs', 'check on the agent Job', { namespace: agentNamespace }),
    p('list', 'batch', 'jobs', 'find leftover agents (devop clean)', { namespace: agentNamespace }),
    p('delete', 'batch', 'jobs', 'remove the agent Job', { namespace: agentNamespace }),
    p('create', '', 'secrets', "keep the agent's token in a Secret of its own", { namespace: agentNamespace }),
    p('get', '', 'secrets', "read a running agent's token to reuse it", { namespace: agentNamespace }),
    p('delete', '', 'secrets', "remove an ephemeral agent's Secret (--ephemeral only)", { optional: true }),
    p('patch', '', 'pods', 'run the agent as an ephemeral container (--ephemeral only)', {
      subresource: 'ephemeralcontainers',
      optional: true,
    }),
    p('get', 'coordination.k8s.io', 'leases', 'check the cluster-wide steal lock', { optional: true }),
    p('create', 'coordination.k8s.io', 'leases', 'take the cluster-wide steal lock', { optional: true }),
    p('update', 'coordination.k8s.io', 'leases', 'renew the cluster-wide steal lock', { optional: true }),
  ];
}

/** Pod Security admission levels that reject the agent (hostPID, NET_ADMIN/NET_RAW/SYS_ADMIN/SYS_PTRACE). Pure. */
export function podSecurityCheck(ns: V1Namespace | undefined, namespace: string): DoctorCheck {
  const labels = ns?.metadata?.labels ?? {};
  const enforce = labels['pod-security.kubernetes.io/enforce'];
  const title = `Pod Security admission (namespace ${namespace})`;
  if (enforce === 'baseline' || enforce === 'restricted') {
    return {
      id: 'pod-security',
      title,
      status: 'fail',
      detail:
        `pod-security.kubernetes.io/enforce=${enforce} rejects the agent (it needs hostPID and the NET_ADMIN, ` +
        `NET_RAW, SYS_ADMIN, SYS_PTRACE capabilities)`,
      fix:
        `run the agent in a privileged namespace (--agent-namespace NS, where NS has enforce=privileged or no ` +
        `label), or ask an admin: kubectl label ns ${namespace} pod-security.kubernetes.io/enforce=privileged ` +
        `--overwrite`,
    };
  }
  const warn = labels['pod-security.kubernetes.io/warn'];
  const audit = labels['pod-security.kubernetes.io/audit'];
  const soft = [warn && `warn=${warn}`, audit && `audit=${audit}`].filter(Boolean).join(', ');
  return {
    id: 'pod-security',
    title,
    status: 'ok',
    detail: `enforce=${enforce ?? '(none: privileged)'}${soft ? `; ${soft} only warns/audits` : ''}`,
  };
}

/** Container runtimes whose container IDs and cgroups the agent knows. Pure. */
export function runtimeCheck(nodes: { name: string; runtime: string }[]): DoctorCheck {
  const known = /^(containerd|cri-o|docker):\/\//;
  const unknown = nodes.filter((n) => !known.test(n.runtime));
  const list = nodes.map((n) => `${n.name}: ${n.runtime || 'unknown'}`).join(', ');
  if (nodes.length === 0)
    return {
      id: 'runtime',
      title: 'node container runtime',
      status: 'warn',
      detail: 'no nodes found',
      fix: 'check that the cluster has nodes (kubectl get nodes)',
    };
  if (unknown.length > 0) {
    return {
      id: 'runtime',
      title: 'node container runtime',
      status: 'warn',
      detail: `${list} — not one devop knows (containerd, cri-o, docker)`,
      fix: 'try --ephemeral (the agent then runs inside the pod and needs no container lookup)',
    };
  }
  return { id: 'runtime', title: 'node container runtime', status: 'ok', detail: list };
}

function fail(id: string, title: string, err: unknown, fix: string): DoctorCheck {
  return {
    id,
    title,
    status: 'fail',
    detail: isUserError(err) ? err.message : apiErrorMessage(err),
    fix: isUserError(err) ? err.hint : fix,
  };
}

async function apiCheck(kc: KubeConfig): Promise<DoctorCheck> {
  const title = 'API server';
  try {
    const version = await kc.makeApiClient(VersionApi).getCode();
    return {
      id: 'api',
      title,
      status: 'ok',
      detail: `${kc.getCurrentCluster()?.server} answers, Kubernetes ${version.gitVersion}`,
    };
  } catch (err) {
    const mapped = mapApiError(err, { action: 'read the server version' });
    return fail('api', title, mapped, 'check that the cluster is up and the context points at it');
  }
}

async function rbacChecks(kc: KubeConfig, namespace: string, agentNamespace: string): Promise<DoctorCheck[]> {
  const needed = neededPermissions(namespace, agentNamespace);
  let denied: AccessCheck[];
  try {
    denied = await deniedChecks(
      kc,
      needed.map((n) => n.check),
    );
  } catch (err) {
    return [
      fail('rbac', 'RBAC', err, 'devop asks the API server with SelfSubjectAccessReview; check that it is allowed'),
    ];
  }
  const user = kc.getCurrentUser()?.name ?? 'the current user';
  return needed.map((n): DoctorCheck => {
    const what = `${describeCheck(n.check)} in ${n.check.namespace}`;
    const isDenied = denied.includes(n.check);
    if (!isDenied)
      return {
        id: `rbac:${describeCheck(n.check)}`,
        title: `RBAC ${what}`,
        status: 'ok',
        detail: `allowed (to ${n.why})`,
      };
    const { resource, subresource, group: apiGroup, namespace } = n.check;
    const fullResource = subresource ? `${resource}/${subresource}` : resource;
    const group = apiGroup ? ` (apiGroup ${apiGroup})` : '';
    return {
      id: `rbac:${describeCheck(n.check)}`,
      title: `RBAC ${what}`,
      status: n.optional ? 'warn' : 'fail',
      detail: `${user} may not ${describeCheck(n.check)} in namespace ${n.check.namespace} (needed to ${n.why})`,
      fix: `ask a cluster admin for a Role granting "${n.check.verb}" on "${fullResource}"${group} in ${namespace}`,
    };
  });
}

async function imageCheck(kc: KubeConfig, image: string, agentNamespace: string): Promise<DoctorCheck> {
  const title = `agent image ${image}`;
  const core = kc.makeApiClient(CoreV1Api);
  try {
    const pods = await core.listNamespacedPod({
      namespace: agentNamespace,
      labelSelector: `${AGENT_LABELS.name}=${AGENT_LABELS.nameValue}`,
    });
    const statuses = pods.items.flatMap((p) =>
      (p.status?.containerStatuses ?? [])
        .filter((s) => s.name === AGENT_CONTAINER_NAME && s.image === image)
        .map((s) => ({ pod: p.metadata?.name ?? '', s })),
    );
    const pulled = statuses.find(({ s }) => s.imageID || s.state?.running || s.state?.terminated);
    if (pulled) return { id: 'image', title, status: 'ok', detail: `pulled before (agent pod ${pulled.pod})` };
    const failed = statuses.find(({ s }) => /ImagePull|ErrImage/.test(s.state?.waiting?.reason ?? ''));
    if (failed) {
      return {
        id: 'image',
        title,
        status: 'fail',
        detail:
          `agent pod ${failed.pod}: ${failed.s.state?.waiting?.reason}: ` +
          `${failed.s.state?.waiting?.message ?? ''}`.trim(),
        fix:
          'mirror the image to a registry the nodes can reach and pass --agent-image (or agent.image in ' +
          'devop.json); add imagePullSecrets if it is private',
      };
    }
  } catch {
    // Not allowed to list pods there: the RBAC lines say so.
  }
  return {
    id: 'image',
    title,
    status: 'info',
    detail: 'not verified (no agent has run here yet): the nodes must be able to pull it',
    fix: 'in an air-gapped or private-registry cluster, mirror it and pass --agent-image',
  };
}

async function nodeRuntimeCheck(kc: KubeConfig, nodeName: string | undefined): Promise<DoctorCheck> {
  const core = kc.makeApiClient(CoreV1Api);
  try {
    const nodes = nodeName ? [await core.readNode({ name: nodeName })] : (await core.listNode()).items;
    return runtimeCheck(
      nodes.map((n) => ({ name: n.metadata?.name ?? '', runtime: n.status?.nodeInfo?.containerRuntimeVersion ?? '' })),
    );
  } catch (err) {
    if (apiErrorCode(err) === 403)
      return {
        id: 'runtime',
        title: 'node container runtime',
        status: 'info',
        detail: 'cannot read nodes (RBAC: nodes are cluster-scoped); not checked',
      };
    return fail(
      'runtime',
      'node container runtime',
      mapApiError(err, { action: 'read the nodes' }),
      'check the API server',
    );
  }
}

async function podSecurity(kc: KubeConfig, agentNamespace: string): Promise<DoctorCheck> {
  const core = kc.makeApiClient(CoreV1Api);
  try {
    return podSecurityCheck(await core.readNamespace({ name: agentNamespace }), agentNamespace);
  } catch (err) {
    if (apiErrorCode(err) === 404)
      return {
        id: 'pod-security',
        title: `namespace ${agentNamespace}`,
        status: 'fail',
        detail: `namespace "${agentNamespace}" not found`,
        fix: 'pass an existing namespace with -n / --agent-namespace',
      };
    if (apiErrorCode(err) === 403)
      return {
        id: 'pod-security',
        title: `Pod Security admission (namespace ${agentNamespace})`,
        status: 'info',
        detail: 'cannot read the namespace (RBAC); its pod-security labels were not checked',
      };
    return fail(
      'pod-security',
      `namespace ${agentNamespace}`,
      mapApiError(err, { action: 'read the namespace' }),
      'check the API server',
    );
  }
}

export async function runDoctor(options: DoctorOptions): Promise<DoctorReport> {
  let loaded: ReturnType<typeof loadKubeConfig>;
  try {
    loaded = loadKubeConfig(options);
  } catch (err) {
    return { ok: false, checks: [fail('kubeconfig', 'kubeconfig', err, 'point --kubeconfig at a kubeconfig file')] };
  }
  const { kc, files, context } = loaded;
  const namespace = options.namespace ?? loaded.namespace;
  const checks: DoctorCheck[] = [
    {
      id: 'kubeconfig',
      title: 'kubeconfig',
      status: 'ok',
      detail:
        `${files.join(', ')}, context ${context}, user ${kc.getCurrentUser()?.name ?? '?'}, namespace ` +
        `${namespace}`,
    },
  ];
  const api = await apiCheck(kc);
  checks.push(api);
  if (api.status === 'fail') return { ok: false, context, namespace, checks };

  let nodeName: string | undefined;
  const resolving = options.target ? resolveTarget(kc, { target: options.target, namespace }) : undefined;
  const targetCheck = resolving?.then(
    (t): DoctorCheck => {
      nodeName = t.nodeName;
      return {
        id: 'target',
        title: `target ${options.target}`,
        status: 'ok',
        detail: `pod ${t.podName} (${t.podReason}), container ${t.container.name}, node ${t.nodeName}`,
      };
    },
    (err: unknown) => fail('target', `target ${options.target}`, err, 'check the target and namespace (devop ls)'),
  );
  // An APIService's or a webhook's pods are in its Service's namespace: a session runs there, so it is checked there.
  const sessionNamespace =
    resolving && options.target && namesClusterScoped(options.target)
      ? await resolving.then(
          (t) => t.namespace,
          () => namespace,
        )
      : namespace;
  const agentNamespace = options.agentNamespace ?? sessionNamespace;
  const [rbac, image, psa, target] = await Promise.all([
    rbacChecks(kc, sessionNamespace, agentNamespace),
    imageCheck(kc, options.agentImage ?? SESSION_DEFAULTS.agentImage, agentNamespace),
    podSecurity(kc, agentNamespace),
    targetCheck,
  ]);
  if (target) checks.push(target);
  checks.push(...rbac, image, await nodeRuntimeCheck(kc, nodeName), psa);
  return { ok: !checks.some((c) => c.status === 'fail'), context, namespace, checks };
}

const MARKS: Record<CheckStatus, string> = { ok: '✓', fail: '✗', warn: '!', info: '-' };

/** One line per check, the fix indented under failures and warnings. */
export function formatDoctorReport(report: DoctorReport): string {
  const lines: string[] = [];
  for (const c of report.checks) {
    lines.push(`${MARKS[c.status]} ${c.title}: ${c.detail}`);
    if (c.fix && (c.status === 'fail' || c.status === 'warn')) lines.push(`    fix: ${c.fix}`);
  }
  const failed = report.checks.filter((c) => c.status === 'fail').length;
  lines.push(
    failed === 0 ? 'devop doctor: all checks passed' : `devop doctor: ${failed} check${failed === 1 ? '' : 's'} failed`,
  );
  return `${lines.join('\n')}\n`;
}
