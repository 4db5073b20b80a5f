// Target resolution: `pod/`, `deploy/`, `sts/`, `rollout/`, `apiservice/` (+ `/container/NAME`) → the pod and container
// a session uses, with the reason that pod was chosen; unknown targets are answered with what exists of that kind. What
// differs per kind lives in targets/<kind>.ts behind one KindResolver.
import type { KubeConfig, V1Container, V1LabelSelector, V1Pod, V1PodSpec } from '@kubernetes/client-node';
import { UserError } from '../../shared/errors.js';
import { apiCall, apiErrorCode, mapApiError } from './errors.js';
import { parseTarget, type Target, type TargetKind } from '../../shared/target.js';
import { apiServiceResolver } from './targets/apiservice.js';
import { deploymentResolver } from './targets/deployment.js';
import { podResolver } from './targets/pod.js';
import {
  kindClients,
  type ExtensionBackend,
  type KindResolvers,
  type WebhookInfo,
  type Workload,
} from './targets/resolver.js';
import { rolloutResolver } from './targets/rollout.js';
import { statefulSetResolver } from './targets/statefulset.js';
import { mutatingWebhookResolver, validatingWebhookResolver } from './targets/webhook.js';

/** One resolver per kind a target can name. */
export const KIND_RESOLVERS: KindResolvers = {
  pod: podResolver,
  deployment: deploymentResolver,
  statefulset: statefulSetResolver,
  rollout: rolloutResolver,
  apiservice: apiServiceResolver,
  validatingwebhookconfiguration: validatingWebhookResolver,
  mutatingwebhookconfiguration: mutatingWebhookResolver,
};

type NamedTarget = Exclude<Target, { kind: 'targetless' }>;

export interface ResolvedTarget {
  ref: NamedTarget;
  namespace: string;
  pod: V1Pod;
  podName: string;
  podUid: string;
  nodeName: string;
  podIP?: string;
  container: V1Container;
  containerId: string;
  /** Why this pod, e.g. "newest Ready pod of 3". */
  podReason: string;
  /** Why this container, e.g. "the only container". */
  containerReason: string;
  /** An extension target (apiservice/): what the API server calls, and its Available condition. */
  extension?: ExtensionBackend;
  /** The pod ports the target serves on (an APIService's or webhook Service's targetPort): the default of -p. */
  ports?: number[];
  /** For a webhook configuration: the webhooks whose requests reach these pods. */
  webhooks?: WebhookInfo[];
  /** The pod is on the node's network (hostNetwork: true), taken only with --allow-host-network. */
  hostNetwork?: boolean;
}

const DEFAULT_CONTAINER_ANNOTATION = 'kubectl.kubernetes.io/default-container';

/** `matchLabels` + `matchExpressions` as a label selector string. */
export function selectorToString(selector: V1LabelSelector | undefined): string {
  const parts: string[] = [];
  for (const [k, v] of Object.entries(selector?.matchLabels ?? {})) parts.push(`${k}=${v}`);
  for (const e of selector?.matchExpressions ?? []) {
    const values = (e.values ?? []).join(',');
    if (e.operator === 'In') parts.push(`${e.key} in (${values})`);
    else if (e.operator === 'NotIn') parts.push(`${e.key} notin (${values})`);
    else if (e.operator === 'Exists') parts.push(e.key);
    else if (e.operator === 'DoesNotExist') parts.push(`!${e.key}`);
  }
  return parts.join(',');
}

export function isPodReady(pod: V1Pod): boolean {
  if (pod.metadata?.deletionTimestamp) return false;
  if (pod.status?.phase !== 'Running') return false;
  return (pod.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');
}

/** A short description of why a pod is not Ready, e.g. "Pending (ContainerCreating)" or "Running, not Ready". */
export function podState(pod: V1Pod): string {
  if (pod.metadata?.deletionTimestamp) return 'Terminating';
  const phase = pod.status?.phase ?? 'Unknown';
  for (const cs of pod.status?.containerStatuses ?? []) {
    const reason = cs.state?.waiting?.reason ?? cs.state?.terminated?.reason;
    if (reason) return `${phase} (${reason})`;
  }
  const unschedulable = (pod.status?.conditions ?? []).find((c) => c.type === 'PodScheduled' && c.status === 'False');
  if (unschedulable) return `${phase} (${unschedulable.reason ?? 'not scheduled'})`;
  return isPodReady(pod) ? 'Ready' : `${phase}, not Ready`;
}

function created(pod: V1Pod): number {
  const t = pod.metadata?.creationTimestamp;
  return t ? new Date(t).getTime() : 0;
}

/** Picks the newest Ready pod (a rollout keeps the newest ones); throws with every pod's state when none is Ready. */
export function choosePod(pods: V1Pod[], what: string): { pod: V1Pod; reason: string } {
  const live = pods.filter((p) => !p.metadata?.deletionTimestamp);
  const ready = live
    .filter(isPodReady)
    .sort((a, b) => created(b) - created(a) || (a.metadata?.name ?? '').localeCompare(b.metadata?.name ?? ''));
  if (ready.length === 0) {
    if (pods.length === 0)
      throw new UserError(
        `${what} has no pods`,
        'scale it up (e.g. `kubectl scale --replicas=1 …`) or pick another target',
      );
    const states = pods.map((p) => `${p.metadata?.name}: ${podState(p)}`).join(', ');
    throw new UserError(
      `${what} has no Ready pod (${states})`,
      'wait until a pod is Ready (`kubectl get pods`), or fix what keeps them from starting',
    );
  }
  const reason =
    ready.length === 1
      ? live.length === 1
        ? 'its only pod'
        : `the only Ready pod of ${live.length}`
      : `newest Ready pod of ${ready.length}`;
  return { pod: ready[0], reason };
}

export function chooseContainer(pod: V1Pod, wanted: string | undefined): { container: V1Container; reason: string } {
  const containers = pod.spec?.containers ?? [];
  const names = containers.map((c) => c.name);
  if (wanted) {
    const found = containers.find((c) => c.name === wanted);
    if (!found)
      throw new UserError(
        `pod ${pod.metadata?.name} has no container "${wanted}" (containers: ${names.join(', ')})`,
        'pass one of the listed names after /container/',
      );
    return { container: found, reason: 'as asked' };
  }
  const annotated = pod.metadata?.annotations?.[DEFAULT_CONTAINER_ANNOTATION];
  const byAnnotation = annotated ? containers.find((c) => c.name === annotated) : undefined;
  if (byAnnotation) return { container: byAnnotation, reason: `the pod's default-container annotation` };
  if (containers.length === 0)
    throw new UserError(`pod ${pod.metadata?.name} has no containers`, 'pick another target');
  return {
    container: containers[0],
    reason:
      containers.length === 1
        ? 'the only container'
        : `the first of ${containers.length} (add /container/NAME to choose)`,
  };
}

async function notFound(
  kind: TargetKind,
  name: string,
  namespace: string,
  existing: () => Promise<string[]>,
): Promise<UserError> {
  let names: string[] | undefined;
  try {
    names = await existing();
  } catch {
    names = undefined;
  }
  const { plural, clusterScoped } = KIND_RESOLVERS[kind];
  const list =
    names === undefined
      ? ''
      : names.length === 0
        ? ` (there are no ${plural} in it)`
        : ` (${plural} there: ${names.slice(0, 20).join(', ')}${names.length > 20 ? ', …' : ''})`;
  if (clusterScoped)
    return new UserError(
      `${kind} "${name}" not found${list.replace(' in it', '')}`,
      `check the name (\`kubectl get ${plural}\` lists them)`,
    );
  return new UserError(
    `${kind} "${name}" not found in namespace "${namespace}"${list}`,
    'check the name and -n/--namespace; `devop ls` lists the targets',
  );
}

/**
 * Whether a target names a cluster-scoped object (apiservice/, the webhook configurations): its pods are in its
 * Service's namespace, known once it is resolved, whatever -n says. A target that does not parse is not.
 */
export function namesClusterScoped(target: string): boolean {
  try {
    const parsed = parseTarget(target);
    return parsed.kind !== 'targetless' && KIND_RESOLVERS[parsed.kind].clusterScoped === true;
  } catch {
    return false;
  }
}

/**
 * Whether a pod shares its node's network namespace. The agent joins the pod's netns, which is then the node's: a steal
 * redirects the port for every pod on the node, a flush closes the node's connections on it, a mirror copies them all.
 */
export function usesHostNetwork(pod: V1Pod): boolean {
  return pod.spec?.hostNetwork === true;
}

/** Refuses a pod on the node's network unless --allow-host-network was given. */
export function checkHostNetwork(pod: V1Pod, allow: boolean | undefined): void {
  if (!usesHostNetwork(pod) || allow) return;
  throw new UserError(
    `pod ${pod.metadata?.name} uses its node's network (hostNetwork: true): stealing, mirroring or flushing its ` +
      `ports would act on every connection to those ports on node ${pod.spec?.nodeName ?? '(unscheduled)'}`,
    'pick a target that is not on the host network, or pass --allow-host-network (allowHostNetwork) to take it anyway',
  );
}

/** Refuses to replace a workload whose pod template is on the node's network (its copy would be) unless allowed. */
export function checkTemplateHostNetwork(what: string, spec: V1PodSpec | undefined, allow: boolean | undefined): void {
  if (spec?.hostNetwork !== true || allow) return;
  throw new UserError(
    `${what} runs its pods on their node's network (hostNetwork: true), and so would its copy: stealing, mirroring ` +
      "or flushing the copy's ports would act on every connection to those ports on its node",
    'pick a workload that is not on the host network, or pass --allow-host-network (allowHostNetwork) to replace it ' +
      'anyway',
  );
}

/** The warning a session on a host-network pod starts with (--allow-host-network). */
export function hostNetworkWarning(target: Pick<ResolvedTarget, 'podName' | 'nodeName'>): string {
  return (
    `pod ${target.podName} uses its node's network (--allow-host-network): steal, mirror and flush act on every ` +
    `connection to its ports on node ${target.nodeName}, whichever pod it is for`
  );
}

/**
 * Resolves a target string in a namespace. The namespace check runs beside the lookup, so a typo'd one is named. A pod
 * on the node's network is refused unless allowHostNetwork.
 */
export async function resolveTarget(
  kc: KubeConfig,
  input: { target: string; namespace: string; allowHostNetwork?: boolean },
): Promise<ResolvedTarget> {
  const parsed = parseTarget(input.target);
  if (parsed.kind === 'targetless')
    throw new UserError('a target is needed here', 'pass -t pod/NAME, deploy/NAME, sts/NAME or rollout/NAME');
  const ref: NamedTarget = parsed;
  let { namespace } = input;
  const clients = kindClients(kc);
  const resolver = KIND_RESOLVERS[ref.kind];
  const namespaceCheck = resolver.clusterScoped
    ? Promise.resolve(true)
    : clients.core.readNamespace({ name: namespace }).then(
        () => true,
        (err: unknown) => apiErrorCode(err) !== 404, // 403 etc.: cannot tell, assume it exists
      );
  let workload: Workload;
  try {
    workload = await resolver.read(clients, ref.name, namespace, ref);
  } catch (err) {
    if (apiErrorCode(err) === 404) {
      if (!(await namespaceCheck))
        throw new UserError(
          `namespace "${namespace}" not found`,
          'pass an existing namespace with -n (`kubectl get namespaces` lists them)',
        );
      throw await notFound(ref.kind, ref.name, namespace, () => resolver.names(clients, namespace));
    }
    // A cluster-scoped object is not in a namespace: a denial must not name one.
    throw mapTargetError(err, resolver.resource, resolver.clusterScoped ? undefined : namespace, ref.name);
  }

  let chosen: { pod: V1Pod; reason: string };
  let podNamespace = namespace;
  if (workload.kind === 'pod') {
    if (!isPodReady(workload.pod))
      throw new UserError(
        `pod "${ref.name}" is not Ready (${podState(workload.pod)})`,
        'wait until it is Ready (`kubectl get pod`), or target its deployment',
      );
    chosen = { pod: workload.pod, reason: 'as asked' };
  } else {
    const what = `${ref.kind}/${ref.name}`;
    namespace = workload.namespace ?? namespace;
    const labelSelector = selectorToString(workload.selector);
    if (!labelSelector)
      throw new UserError(`${what} has an empty selector`, 'give it a selector, or target a pod with pod/NAME');
    podNamespace = workload.namespace ?? namespace;
    const list = await apiCall(
      { action: `list the pods of ${what}`, verb: 'list', resource: 'pods', namespace: podNamespace },
      () => clients.core.listNamespacedPod({ namespace: podNamespace, labelSelector }),
    );
    chosen = choosePod(list.items, what);
  }
  const pod = chosen.pod;
  checkHostNetwork(pod, input.allowHostNetwork);
  const targetPort = workload.kind === 'selector' ? workload.targetPort : undefined;
  const served = targetPort === undefined ? undefined : containerPort(pod, targetPort, ref);
  const { container, reason: containerReason } = served
    ? { container: served.container, reason: `serves port ${served.port}` }
    : chooseContainer(pod, ref.container);
  const status = (pod.status?.containerStatuses ?? []).find((s) => s.name === container.name);
  if (!status?.containerID || !status.state?.running) {
    throw new UserError(
      `container "${container.name}" of pod ${pod.metadata?.name} is not running`,
      'wait until it runs, or pick another container with /container/NAME',
    );
  }
  if (!pod.spec?.nodeName)
    throw new UserError(`pod ${pod.metadata?.name} is not scheduled on a node`, 'wait until it runs');
  const extension = workload.kind === 'selector' ? workload.extension : undefined;
  return {
    ref,
    namespace: podNamespace,
    pod,
    podName: pod.metadata?.name ?? '',
    podUid: pod.metadata?.uid ?? '',
    nodeName: pod.spec.nodeName,
    podIP: pod.status?.podIP,
    container,
    containerId: status.containerID,
    podReason: chosen.reason,
    containerReason,
    ...(extension ? { extension } : {}),
    ports: served ? [served.port] : undefined,
    webhooks: workload.kind === 'selector' ? workload.webhooks : undefined,
    ...(usesHostNetwork(pod) ? { hostNetwork: true } : {}),
  };
}

/** The container and port number a Service's targetPort (a number, or a container port's name) means in a pod. */
/**
 * The pod's container and port a Service's targetPort names (a port name, or a number that a container declares);
 * undefined when none does. The API may give a numeric targetPort as a string.
 */
export function declaredPort(
  pod: V1Pod,
  targetPort: number | string,
): { container: V1Container; port: number } | undefined {
  const wanted = typeof targetPort === 'string' && /^[0-9]+$/.test(targetPort) ? Number(targetPort) : targetPort;
  for (const c of pod.spec?.containers ?? [])
    for (const p of c.ports ?? [])
      if (p.name === wanted || p.containerPort === wanted) return { container: c, port: p.containerPort };
  return undefined;
}

function containerPort(
  pod: V1Pod,
  targetPort: number | string,
  ref: NamedTarget,
): { container: V1Container; port: number } {
  const declared = declaredPort(pod, targetPort);
  if (declared) return declared;
  if (typeof targetPort === 'number' || /^[0-9]+$/.test(targetPort))
    return { container: chooseContainer(pod, ref.container).container, port: Number(targetPort) };
  throw new UserError(
    `no container of pod ${pod.metadata?.name} has a port named "${targetPort}" (the Service's targetPort)`,
    'name the port in the pod template, or use a number as the Service targetPort',
  );
}

function mapTargetError(err: unknown, resource: string, namespace: string | undefined, name: string): unknown {
  if (err instanceof UserError) return err;
  return mapApiError(err, { action: `find the target ${name}`, verb: 'get', resource, namespace, name });
}
