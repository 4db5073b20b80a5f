// Starting the agent of a session (reusing one is agent-reuse.ts): a Job pinned to the target pod's node, or an
// ephemeral container, with its token in a Secret of its own; then waiting for it by watching its pod, failing clearly
// on image pull errors, an unschedulable pod, a crash (with its last log lines) or the start-up timeout (with the pod's
// events).
import { randomBytes } from 'node:crypto';
import {
  BatchV1Api,
  CoreV1Api,
  type KubeConfig,
  type V1ContainerStatus,
  type V1EphemeralContainer,
  type V1Job,
  type V1Pod,
} from '@kubernetes/client-node';
import {
  AGENT_ANNOTATIONS,
  AGENT_CONTAINER_NAME,
  AGENT_LABELS,
  agentCapabilities,
  agentSecretName,
  nativePortOf,
} from '../../shared/agent-contract.js';
import { UserError } from '../../shared/errors.js';
import { clusterUser } from './agent-reuse.js';
import { apiCall, apiErrorCode, mapApiError } from './errors.js';
import { jobRefusal } from './job-refusal.js';
import { waitForPods } from './watch.js';
import {
  buildAgentEphemeralContainer,
  buildAgentJob,
  buildAgentSecret,
  buildTargetlessAgentJob,
  TARGETLESS_LABEL_VALUE,
  type AgentSpecInput,
  type SecretOwner,
} from './agent-manifest.js';
import type { AgentEndpoint, AgentOptions } from './agent-types.js';
import type { ResolvedTarget } from './target.js';

export type { AgentEndpoint, AgentOptions } from './agent-types.js';

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

export function newAgentId(): string {
  return randomBytes(5).toString('hex');
}

function isRunning(status: V1ContainerStatus | undefined): boolean {
  return Boolean(status?.state?.running);
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

/**
 * Judges the agent container's state: running, still starting (undefined), or failed and why. Pure. `tokenSecret`: the
 * agent's Secret, made just after its Job (it needs the Job's uid): until kubelet sees it, kubelet reports
 * CreateContainerConfigError naming it and tries again (pkg/kubelet/kubelet_pods.go makeEnvironmentVariables), so
 * that one is still starting.
 */
export function judgeAgentPod(
  pod: V1Pod,
  status: V1ContainerStatus | undefined,
  tokenSecret?: string,
): Verdict | undefined {
  const waiting = status?.state?.waiting;
  if (
    tokenSecret &&
    waiting?.reason === 'CreateContainerConfigError' &&
    waiting.message?.includes(`"${tokenSecret}"`) &&
    / not found/.test(waiting.message)
  )
    return undefined;
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
        `check the agent's permissions on the node (${agentCapabilities('job', true).join(', ')}, hostPID; try ` +
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
  const spec = await agentSpecInput(kc, target, options);
  const { agentId, port } = spec;
  return runAgentJob(kc, buildAgentJob(spec), target.podName, options, {
    agentId,
    port,
    nativePort: nativePortOf(port),
    token: newToken(),
  });
}

/** The per-agent token every session presents in its hello: 192 random bits. */
function newToken(): string {
  return randomBytes(24).toString('hex');
}

/** Creates the Secret that holds an agent's token, owned by `owner`. */
async function createAgentSecret(
  kc: KubeConfig,
  input: { namespace: string; agentId: string; token: string; owner: SecretOwner; createdBy: string },
): Promise<void> {
  const body = buildAgentSecret(input);
  const name = body.metadata?.name ?? '';
  await apiCall(
    { action: "store the agent's token", verb: 'create', resource: 'secrets', namespace: input.namespace, name },
    () => kc.makeApiClient(CoreV1Api).createNamespacedSecret({ namespace: input.namespace, body }),
  );
}

/** Deletes an agent's Secret whose agent never started. */
async function deleteAgentSecret(kc: KubeConfig, namespace: string, name: string): Promise<void> {
  await kc
    .makeApiClient(CoreV1Api)
    .deleteNamespacedSecret({ name, namespace })
    .catch(() => undefined); // gone already, or the API is down: the target pod's deletion removes it (owner)
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
  const created = await apiCall(
    { action: 'create the agent Job', verb: 'create', resource: 'jobs.batch', namespace: ns, name },
    () => batch.createNamespacedJob({ namespace: ns, body: job }),
  );
  // The wait for the pod starts beside the Secret's creation (one round trip less): a pod that reaches kubelet first
  // waits for the Secret, which judgeAgentPod counts as still starting.
  const secretFailed = new AbortController();
  const startDone = new AbortController();
  const signal = AbortSignal.any([...(options.signal ? [options.signal] : []), secretFailed.signal, startDone.signal]);
  try {
    const running = waitForAgentPod(kc, {
      namespace: ns,
      labelSelector: `${AGENT_LABELS.name}=${AGENT_LABELS.nameValue},${AGENT_LABELS.targetPod}=${targetPod}`,
      match: (p) => p.metadata?.annotations?.[AGENT_ANNOTATIONS.agentId] === agent.agentId,
      status: (p) => p.status?.containerStatuses?.find((s) => s.name === AGENT_CONTAINER_NAME),
      container: AGENT_CONTAINER_NAME,
      tokenSecret: agentSecretName(agent.agentId),
      what: `agent Job ${name}`,
      options: { ...options, signal },
    });
    running.catch(() => undefined); // a failed Secret is the error to report
    // A pod the API server refuses never appears: the Job's FailedCreate event says why, long before the timeout.
    const refused = jobRefusal(kc, ns, { name, uid: created.metadata?.uid ?? '' }, startDone.signal).then((e) => {
      throw e;
    });
    refused.catch(() => undefined);
    // Owned by the Job (its uid is known only now): garbage collection removes it with the Job.
    await createAgentSecret(kc, {
      namespace: ns,
      agentId: agent.agentId,
      token: agent.token,
      owner: { apiVersion: 'batch/v1', kind: 'Job', name, uid: created.metadata?.uid ?? '' },
      createdBy: job.metadata?.annotations?.[AGENT_ANNOTATIONS.createdBy] ?? '',
    }).catch((err: unknown) => {
      secretFailed.abort(err);
      throw err;
    });
    const pod = await Promise.race([running, refused]);
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
  } finally {
    startDone.abort();
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
  const spec = await agentSpecInput(kc, target, options);
  const container = buildAgentEphemeralContainer(spec);
  const token = newToken();
  // An ephemeral container is no object of its own: the target pod owns the Secret (removed with it). The Secret lives
  // as long as the agent may (a later session reuses a running agent with its token); `devop clean` removes it once
  // the agent's container has ended.
  const secretName = agentSecretName(spec.agentId);
  await createAgentSecret(kc, {
    namespace: target.namespace,
    agentId: spec.agentId,
    token,
    owner: { apiVersion: 'v1', kind: 'Pod', name: target.podName, uid: target.podUid },
    createdBy: spec.createdBy,
  });
  try {
    await addEphemeralContainer(kc, target, container, options);
  } catch (err) {
    await deleteAgentSecret(kc, target.namespace, secretName);
    throw err;
  }
  return {
    mode: 'ephemeral',
    name: container.name,
    agentPod: target.podName,
    agentNamespace: target.namespace,
    agentContainer: container.name,
    port: spec.port,
    nativePort: nativePortOf(spec.port),
    token,
    agentId: spec.agentId,
    reused: false,
  };
}

/** Adds the agent's ephemeral container to the target pod and waits until it runs. */
async function addEphemeralContainer(
  kc: KubeConfig,
  target: ResolvedTarget,
  container: V1EphemeralContainer,
  options: AgentOptions,
): Promise<void> {
  const core = kc.makeApiClient(CoreV1Api);
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
}

async function agentSpecInput(kc: KubeConfig, target: ResolvedTarget, options: AgentOptions): Promise<AgentSpecInput> {
  const agentId = newAgentId();
  const taken = (target.pod.spec?.containers ?? []).flatMap((c) => (c.ports ?? []).map((p) => p.containerPort));
  return {
    agentId,
    namespace: options.agentNamespace,
    image: options.image,
    port: pickAgentPort(taken),
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
    createdBy: options.createdBy ?? (await clusterUser(kc)),
    flush: options.flush,
    privileged: options.privileged,
    mirror: options.mirror ?? false,
    logLevel: options.logLevel,
    extras: options.extras,
  };
}

/** Creates a targetless agent (outgoing connections and DNS only, in the agent namespace) and waits until it runs. */
export async function createTargetlessAgent(kc: KubeConfig, options: AgentOptions): Promise<AgentEndpoint> {
  const agentId = newAgentId();
  const port = pickAgentPort([]);
  const job = buildTargetlessAgentJob({
    agentId,
    namespace: options.agentNamespace,
    image: options.image,
    port,
    idleSeconds: options.idleSeconds,
    ttlSeconds: options.ttlSeconds,
    owner: options.owner,
    createdBy: options.createdBy ?? (await clusterUser(kc)),
    logLevel: options.logLevel,
  });
  return runAgentJob(kc, job, TARGETLESS_LABEL_VALUE, options, { agentId, port, token: newToken() });
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
    /** The agent's Secret when it may appear after the pod (judgeAgentPod). */
    tokenSecret?: string;
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
      return judgeAgentPod(pod, input.status(pod), input.tokenSecret);
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
