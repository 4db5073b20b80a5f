// The agent of a session: reuse a running devop agent that already serves the target pod, or start one (a Job pinned to
// the pod's node, or an ephemeral container) and wait for it by watching its pod, failing clearly on image pull errors,
// an unschedulable pod, a crash (with its last log lines) or the start-up timeout (with the pod's events).
import { randomBytes } from 'node:crypto';
import {
  BatchV1Api,
  CoreV1Api,
  type KubeConfig,
  type V1ContainerStatus,
  type V1EnvVar,
  type V1Job,
  type V1Pod,
} from '@kubernetes/client-node';
import {
  AGENT_ANNOTATIONS,
  AGENT_CAPABILITIES,
  AGENT_CONTAINER_NAME,
  AGENT_ENV,
  AGENT_LABELS,
  nativePortOf,
} from '../../shared/agent-contract.js';
import { UserError } from '../../shared/errors.js';
import { apiCall, apiErrorCode, mapApiError } from './errors.js';
import { waitForPods } from './watch.js';
import {
  agentJobName,
  buildAgentEphemeralContainer,
  buildAgentJob,
  buildTargetlessAgentJob,
  TARGETLESS_LABEL_VALUE,
  type AgentExtras,
  type AgentSpecInput,
} from './agent-manifest.js';
import type { ResolvedTarget } from './target.js';

export interface AgentEndpoint {
  mode: 'job' | 'ephemeral';
  /** Job name, or the ephemeral container's name. */
  name: string;
  /** The pod the agent process runs in (the Job's pod; the target pod for an ephemeral container). */
  agentPod: string;
  agentNamespace: string;
  agentContainer: string;
  port: number;
  /** The native data path's port, for agents that run it (set in their env; older agents do not). */
  nativePort?: number;
  token: string;
  agentId: string;
  reused: boolean;
}

export interface AgentOptions {
  image: string;
  agentNamespace: string;
  ephemeral: boolean;
  ttlSeconds: number;
  idleSeconds: number;
  startupTimeoutMs: number;
  flush: boolean;
  privileged: boolean;
  owner: string;
  logLevel?: 'debug' | 'info' | 'warn';
  extras?: AgentExtras;
  signal?: AbortSignal;
}

/**
 * The agent's control port is chosen by the CLI (so no log needs reading to learn it), below Linux's ephemeral port
 * range (32768+) so it cannot clash with the local end of the pod's own outgoing connections. The native data path
 * takes the next port (nativePortOf): both must be free of the pod's declared ports.
 */
const AGENT_PORT_MIN = 20000;
const AGENT_PORT_MAX = 32000;

export function pickAgentPort(taken: readonly number[], random: () => number = Math.random): number {
  for (;;) {
    const port = AGENT_PORT_MIN + Math.floor(random() * (AGENT_PORT_MAX - AGENT_PORT_MIN));
    if (!taken.includes(port) && !taken.includes(nativePortOf(port))) return port;
  }
}

/** The native data path's port from an agent container's env: set by CLIs that know the native path. */
function nativePortIn(env: Parameters<typeof envValue>[0]): { nativePort?: number } {
  const port = Number(envValue(env, AGENT_ENV.nativePort));
  return port > 0 ? { nativePort: port } : {};
}

export function newAgentId(): string {
  return randomBytes(5).toString('hex');
}

function envValue(env: V1EnvVar[] | undefined, name: string): string | undefined {
  return env?.find((e) => e.name === name)?.value;
}

function isRunning(status: V1ContainerStatus | undefined): boolean {
  return Boolean(status?.state?.running);
}

/** Every devop agent pod in a namespace (listed beside the target lookup, so that reuse costs no extra round trip). */
export async function listAgentPods(kc: KubeConfig, agentNamespace: string): Promise<V1Pod[]> {
  const core = kc.makeApiClient(CoreV1Api);
  const list = await apiCall(
    { action: 'look for a running devop agent', verb: 'list', resource: 'pods', namespace: agentNamespace },
    () =>
      core.listNamespacedPod({
        namespace: agentNamespace,
        labelSelector: `${AGENT_LABELS.name}=${AGENT_LABELS.nameValue}`,
      }),
  );
  return list.items;
}

/** A running agent (Job pod or ephemeral container) already serving this pod, if any. */
export async function findAgent(
  kc: KubeConfig,
  target: ResolvedTarget,
  agentNamespace: string,
  agentPods?: Promise<V1Pod[]>,
): Promise<AgentEndpoint | undefined> {
  const ephemeral = (target.pod.spec?.ephemeralContainers ?? []).filter((c) =>
    c.name.startsWith(`${AGENT_CONTAINER_NAME}-`),
  );
  for (const c of ephemeral.reverse()) {
    const status = target.pod.status?.ephemeralContainerStatuses?.find((s) => s.name === c.name);
    const port = Number(envValue(c.env, AGENT_ENV.port));
    const token = envValue(c.env, AGENT_ENV.token);
    if (isRunning(status) && port > 0 && token) {
      return {
        mode: 'ephemeral',
        name: c.name,
        agentPod: target.podName,
        agentNamespace: target.namespace,
        agentContainer: c.name,
        port,
        ...nativePortIn(c.env),
        token,
        agentId: envValue(c.env, AGENT_ENV.agentId) ?? '',
        reused: true,
      };
    }
  }
  const pods = await (agentPods ?? listAgentPods(kc, agentNamespace));
  const candidates = pods
    .filter(
      (p) =>
        !p.metadata?.deletionTimestamp &&
        p.metadata?.labels?.[AGENT_LABELS.targetPod] === target.podName &&
        p.metadata?.labels?.[AGENT_LABELS.targetUid] === target.podUid,
    )
    .filter(
      (p) =>
        p.status?.phase === 'Running' &&
        isRunning(p.status?.containerStatuses?.find((s) => s.name === AGENT_CONTAINER_NAME)),
    )
    .sort((a, b) =>
      String(b.metadata?.creationTimestamp ?? '').localeCompare(String(a.metadata?.creationTimestamp ?? '')),
    );
  for (const pod of candidates) {
    const container = pod.spec?.containers.find((c) => c.name === AGENT_CONTAINER_NAME);
    const port = Number(
      envValue(container?.env, AGENT_ENV.port) ?? pod.metadata?.annotations?.[AGENT_ANNOTATIONS.port],
    );
    const token = envValue(container?.env, AGENT_ENV.token);
    if (port > 0 && token) {
      const agentId = pod.metadata?.annotations?.[AGENT_ANNOTATIONS.agentId] ?? '';
      return {
        mode: 'job',
        name: agentJobName(agentId),
        agentPod: pod.metadata?.name ?? '',
        agentNamespace,
        agentContainer: AGENT_CONTAINER_NAME,
        port,
        ...nativePortIn(container?.env),
        token,
        agentId,
        reused: true,
      };
    }
  }
  return undefined;
}

type Verdict = { ok: V1Pod } | { fail: V1Pod; why: 'image' | 'unschedulable' | 'crash' | 'config'; detail: string };

const IMAGE_REASONS = new Set([
  'ErrImagePull',
  'ImagePullBackOff',
  'InvalidImageName',
  'ErrImageNeverPull',
  'RegistryUnavailable',
]);
const CONFIG_REASONS = new Set(['CreateContainerConfigError', 'CreateContainerError', 'RunContainerError']);
/** A terminated container's reasons for never having started (containerd/CRI-O, dockershim). */
const START_REASONS = new Set(['StartError', 'ContainerCannotRun']);

/** Judges the agent container's state: running, still starting (undefined), or failed and why. Pure. */
export function judgeAgentPod(pod: V1Pod, status: V1ContainerStatus | undefined): Verdict | undefined {
  const waiting = status?.state?.waiting;
  if (waiting?.reason && IMAGE_REASONS.has(waiting.reason))
    return { fail: pod, why: 'image', detail: `${waiting.reason}${waiting.message ? `: ${waiting.message}` : ''}` };
  if (waiting?.reason && CONFIG_REASONS.has(waiting.reason))
    return { fail: pod, why: 'config', detail: `${waiting.reason}${waiting.message ? `: ${waiting.message}` : ''}` };
  if (waiting?.reason === 'CrashLoopBackOff') return { fail: pod, why: 'crash', detail: 'CrashLoopBackOff' };
  const terminated = status?.state?.terminated;
  if (terminated) {
    const { exitCode, reason, message } = terminated;
    const why = reason ? ` (${reason}${message ? `: ${message.trim()}` : ''})` : '';
    // The runtime could not start it (no such executable, a mount it refused): nothing ran, so no log says why.
    const started = !(reason && START_REASONS.has(reason));
    return { fail: pod, why: started ? 'crash' : 'config', detail: `exited with code ${exitCode}${why}` };
  }
  if (pod.status?.phase === 'Failed' || pod.status?.phase === 'Succeeded')
    return {
      fail: pod,
      why: 'crash',
      detail: `pod ${pod.status.phase}${pod.status.reason ? ` (${pod.status.reason})` : ''}`,
    };
  const unschedulable = pod.status?.conditions?.find(
    (c) => c.type === 'PodScheduled' && c.status === 'False' && c.reason === 'Unschedulable',
  );
  if (unschedulable) return { fail: pod, why: 'unschedulable', detail: unschedulable.message ?? 'Unschedulable' };
  if (isRunning(status)) return { ok: pod };
  return undefined;
}

async function lastLogLines(kc: KubeConfig, namespace: string, pod: string, container: string): Promise<string> {
  const core = kc.makeApiClient(CoreV1Api);
  try {
    const text = await core.readNamespacedPodLog({ name: pod, namespace, container, tailLines: 10 });
    const lines = String(text).trim().split('\n').filter(Boolean).slice(-5);
    return lines.length ? ` — last log lines: ${lines.join(' | ')}` : ' (no log output)';
  } catch {
    return '';
  }
}

async function podEvents(kc: KubeConfig, namespace: string, pod: string): Promise<string> {
  const core = kc.makeApiClient(CoreV1Api);
  try {
    const list = await core.listNamespacedEvent({ namespace });
    const events = list.items.filter((e) => e.involvedObject?.name === pod).slice(-5);
    return events.length ? ` — events: ${events.map((e) => `${e.reason}: ${e.message}`).join(' | ')}` : ' (no events)';
  } catch {
    return '';
  }
}

async function failureError(
  kc: KubeConfig,
  v: Extract<Verdict, { fail: V1Pod }>,
  container: string,
  options: AgentOptions,
): Promise<UserError> {
  const pod = v.fail.metadata?.name ?? '';
  const ns = v.fail.metadata?.namespace ?? options.agentNamespace;
  switch (v.why) {
    case 'image':
      return new UserError(
        `the agent image ${options.image} cannot be pulled (${v.detail})`,
        'check --agent-image / agent.image and that the node can pull it (registry access, imagePullSecrets)',
      );
    case 'unschedulable':
      return new UserError(
        `the agent pod ${pod} cannot be scheduled: ${v.detail}`,
        "check the node's capacity and taints; the agent must run on the target pod's node",
      );
    case 'config':
      return new UserError(
        `the agent container cannot start: ${v.detail}`,
        'check the agent options (image, namespace) and the pod events (kubectl describe pod)',
      );
    case 'crash':
      return new UserError(
        `the agent crashed: ${v.detail}${await lastLogLines(kc, ns, pod, container)}`,
        `check the agent's permissions on the node (${AGENT_CAPABILITIES.join(', ')}, hostPID; try ` +
          `--agent-privileged) and its logs: kubectl logs -n ${ns} ${pod}`,
      );
  }
}

/** Creates an agent Job for the target and waits until its container runs. Deletes the Job again if it cannot start. */
export async function createJobAgent(
  kc: KubeConfig,
  target: ResolvedTarget,
  options: AgentOptions,
): Promise<AgentEndpoint> {
  const spec = agentSpecInput(target, options);
  const { agentId, port, token } = spec;
  return runAgentJob(kc, buildAgentJob(spec), target.podName, options, {
    agentId,
    port,
    nativePort: nativePortOf(port),
    token,
  });
}

/**
 * Creates an agent Job (its pod labelled with `targetPod`) and waits until its container runs; deletes the Job again
 * if it cannot start.
 */
async function runAgentJob(
  kc: KubeConfig,
  job: V1Job,
  targetPod: string,
  options: AgentOptions,
  agent: Pick<AgentEndpoint, 'agentId' | 'port' | 'nativePort' | 'token'>,
): Promise<AgentEndpoint> {
  const batch = kc.makeApiClient(BatchV1Api);
  const name = job.metadata?.name ?? '';
  const ns = options.agentNamespace;
  await apiCall({ action: 'create the agent Job', verb: 'create', resource: 'jobs.batch', namespace: ns, name }, () =>
    batch.createNamespacedJob({ namespace: ns, body: job }),
  );
  try {
    const pod = await waitForAgentPod(kc, {
      namespace: ns,
      labelSelector: `${AGENT_LABELS.name}=${AGENT_LABELS.nameValue},${AGENT_LABELS.targetPod}=${targetPod}`,
      match: (p) => p.metadata?.annotations?.[AGENT_ANNOTATIONS.agentId] === agent.agentId,
      status: (p) => p.status?.containerStatuses?.find((s) => s.name === AGENT_CONTAINER_NAME),
      container: AGENT_CONTAINER_NAME,
      what: `agent Job ${name}`,
      options,
    });
    return {
      mode: 'job',
      name,
      agentPod: pod.metadata?.name ?? '',
      agentNamespace: ns,
      agentContainer: AGENT_CONTAINER_NAME,
      ...agent,
      reused: false,
    };
  } catch (err) {
    await deleteAgentJob(kc, ns, name);
    throw err;
  }
}

export async function deleteAgentJob(kc: KubeConfig, namespace: string, name: string): Promise<void> {
  const batch = kc.makeApiClient(BatchV1Api);
  await batch.deleteNamespacedJob({ name, namespace, propagationPolicy: 'Background' }).catch(() => undefined);
}

/** Adds the agent as an ephemeral container of the target pod and waits until it runs. */
export async function createEphemeralAgent(
  kc: KubeConfig,
  target: ResolvedTarget,
  options: AgentOptions,
): Promise<AgentEndpoint> {
  const core = kc.makeApiClient(CoreV1Api);
  const spec = agentSpecInput(target, options);
  const container = buildAgentEphemeralContainer(spec);
  const ctx = {
    action: 'add the agent as an ephemeral container',
    verb: 'patch',
    resource: 'pods/ephemeralcontainers',
    namespace: target.namespace,
    name: target.podName,
  };
  // Update, re-reading on a conflict: another session may add its container at the same moment.
  for (let attempt = 0; ; attempt++) {
    const pod =
      attempt === 0
        ? target.pod
        : await apiCall(ctx, () => core.readNamespacedPod({ name: target.podName, namespace: target.namespace }));
    const body: V1Pod = {
      ...pod,
      spec: { ...pod.spec!, ephemeralContainers: [...(pod.spec?.ephemeralContainers ?? []), container] },
    };
    try {
      await core.replaceNamespacedPodEphemeralcontainers({ name: target.podName, namespace: target.namespace, body });
      break;
    } catch (err) {
      if (apiErrorCode(err) === 409 && attempt < 3) continue;
      throw mapApiError(err, ctx);
    }
  }
  await waitForAgentPod(kc, {
    namespace: target.namespace,
    fieldSelector: `metadata.name=${target.podName}`,
    match: (p) => p.metadata?.name === target.podName,
    status: (p) => p.status?.ephemeralContainerStatuses?.find((s) => s.name === container.name),
    container: container.name,
    what: `ephemeral agent container ${container.name}`,
    options,
  });
  return {
    mode: 'ephemeral',
    name: container.name,
    agentPod: target.podName,
    agentNamespace: target.namespace,
    agentContainer: container.name,
    port: spec.port,
    nativePort: nativePortOf(spec.port),
    token: spec.token,
    agentId: spec.agentId,
    reused: false,
  };
}

function agentSpecInput(target: ResolvedTarget, options: AgentOptions): AgentSpecInput {
  const agentId = newAgentId();
  const taken = (target.pod.spec?.containers ?? []).flatMap((c) => (c.ports ?? []).map((p) => p.containerPort));
  return {
    agentId,
    namespace: options.agentNamespace,
    image: options.image,
    port: pickAgentPort(taken),
    token: randomBytes(24).toString('hex'),
    target: {
      pod: target.podName,
      uid: target.podUid,
      namespace: target.namespace,
      nodeName: target.nodeName,
      containerId: target.containerId,
      container: target.container.name,
    },
    idleSeconds: options.idleSeconds,
    ttlSeconds: options.ttlSeconds,
    owner: options.owner,
    flush: options.flush,
    privileged: options.privileged,
    logLevel: options.logLevel,
    extras: options.extras,
  };
}

/** Creates a targetless agent (outgoing connections and DNS only, in the agent namespace) and waits until it runs. */
export async function createTargetlessAgent(kc: KubeConfig, options: AgentOptions): Promise<AgentEndpoint> {
  const agentId = newAgentId();
  const port = pickAgentPort([]);
  const token = randomBytes(24).toString('hex');
  const job = buildTargetlessAgentJob({
    agentId,
    namespace: options.agentNamespace,
    image: options.image,
    port,
    token,
    idleSeconds: options.idleSeconds,
    ttlSeconds: options.ttlSeconds,
    owner: options.owner,
    logLevel: options.logLevel,
  });
  return runAgentJob(kc, job, TARGETLESS_LABEL_VALUE, options, { agentId, port, token });
}

async function waitForAgentPod(
  kc: KubeConfig,
  input: {
    namespace: string;
    labelSelector?: string;
    fieldSelector?: string;
    match: (p: V1Pod) => boolean;
    status: (p: V1Pod) => V1ContainerStatus | undefined;
    container: string;
    what: string;
    options: AgentOptions;
  },
): Promise<V1Pod> {
  const { options } = input;
  let lastPod: V1Pod | undefined;
  const verdict = await waitForPods<Verdict>(
    kc,
    { namespace: input.namespace, labelSelector: input.labelSelector, fieldSelector: input.fieldSelector },
    (pods) => {
      const pod = pods.find(input.match);
      if (!pod) return undefined;
      lastPod = pod;
      return judgeAgentPod(pod, input.status(pod));
    },
    {
      timeoutMs: options.startupTimeoutMs,
      signal: options.signal,
      onTimeout: async () => {
        const name = lastPod?.metadata?.name;
        const events = name ? await podEvents(kc, input.namespace, name) : ' (its pod was never created)';
        return new UserError(
          `the ${input.what} did not start within ${options.startupTimeoutMs / 1000} s${events}`,
          'check the events (kubectl describe pod), or raise --startup-timeout',
        );
      },
    },
  );
  if ('fail' in verdict) throw await failureError(kc, verdict, input.container, options);
  return verdict.ok;
}
