// Reusing a running agent: which running agent of a target pod this user may reuse (one it started, or the one named
// by --reuse-agent), checked against what devop made for it — the pod owned by the agent Job of its id, the token only
// from that agent's own Secret — and who the cluster says the user is (SelfSubjectReview).
import {
  AuthenticationV1Api,
  BatchV1Api,
  CoreV1Api,
  type KubeConfig,
  type V1ContainerStatus,
  type V1EnvVar,
  type V1Job,
  type V1Pod,
  type V1Secret,
} from '@kubernetes/client-node';
import {
  AGENT_ANNOTATIONS,
  AGENT_CONTAINER_NAME,
  AGENT_ENV,
  AGENT_LABELS,
  AGENT_SECRET_KEY,
  agentSecretName,
} from '../../shared/agent-contract.js';
import type { AgentEndpoint, AgentOptions } from './agent-types.js';
import { agentJobName } from './agent-manifest.js';
import { apiCall, apiErrorCode } from './errors.js';
import type { ResolvedTarget } from './target.js';

/**
 * Who the cluster says the current user is (authentication.k8s.io/v1 SelfSubjectReview, Kubernetes 1.28+): recorded on
 * the agents devop starts, and compared before reusing one. Older clusters: the kubeconfig's user name, marked so.
 */
export async function clusterUser(kc: KubeConfig): Promise<string> {
  try {
    const review = await kc.makeApiClient(AuthenticationV1Api).createSelfSubjectReview({
      body: { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' },
    });
    const name = review.status?.userInfo?.username;
    if (name) return name;
  } catch {
    // Not served (before 1.28) or not allowed: the kubeconfig's name is the best there is.
  }
  return `kubeconfig:${kc.getCurrentUser()?.name ?? 'unknown'}`;
}

/** The native data path's port from an agent container's env: set by CLIs that know the native path. */
function nativePortIn(env: Parameters<typeof envValue>[0]): { nativePort?: number } {
  const port = Number(envValue(env, AGENT_ENV.nativePort));
  return port > 0 ? { nativePort: port } : {};
}

function envValue(env: V1EnvVar[] | undefined, name: string): string | undefined {
  return env?.find((e) => e.name === name)?.value;
}

/** The Secret an agent container's token comes from (secretKeyRef), if that is where it comes from. */
function tokenSecretOf(env: V1EnvVar[] | undefined): string | undefined {
  const ref = env?.find((e) => e.name === AGENT_ENV.token)?.valueFrom?.secretKeyRef;
  return ref?.key === AGENT_SECRET_KEY ? ref.name : undefined;
}

/** Why a running agent may not be reused, or its token when it may. */
type Vetting = { token: string } | { skip: string };

/** An agent's token Secret as read, or why it cannot be: never rejects, so it may be read before it is needed. */
async function readAgentSecret(
  kc: KubeConfig,
  input: { namespace: string; agentId: string; env: V1EnvVar[] | undefined },
): Promise<V1Secret | { skip: string }> {
  const secretName = agentSecretName(input.agentId);
  if (tokenSecretOf(input.env) !== secretName) return { skip: 'its token is not in its own Secret' };
  try {
    return await kc.makeApiClient(CoreV1Api).readNamespacedSecret({ name: secretName, namespace: input.namespace });
  } catch (err) {
    return { skip: `its Secret cannot be read (${apiErrorCode(err) ?? (err as Error).message})` };
  }
}

/**
 * An agent's token from its Secret (as read by readAgentSecret), after checking that the Secret is the one devop made
 * for that agent (owned by `ownerUid`) and that the agent was started by this user, or asked for by name.
 */
function vetAgent(
  read: V1Secret | { skip: string },
  input: { name: string; ownerUid: string },
  me: string,
  reuseAgent: string | undefined,
): Vetting {
  if ('skip' in read) return read;
  const secret = read;
  if (!secret.metadata?.ownerReferences?.some((o) => o.uid === input.ownerUid))
    return { skip: 'its Secret is not owned by it' };
  const creator = secret.metadata?.annotations?.[AGENT_ANNOTATIONS.createdBy];
  if (creator !== me && input.name !== reuseAgent)
    return { skip: `started by ${creator ?? 'an unknown user'} (reuse it by name: --reuse-agent ${input.name})` };
  const data = secret.data?.[AGENT_SECRET_KEY];
  return data ? { token: Buffer.from(data, 'base64').toString('utf8') } : { skip: 'its Secret holds no token' };
}

/** Checks that an agent pod belongs to the agent Job devop made for it (controller owner, same uid). */
async function jobOfPod(kc: KubeConfig, pod: V1Pod, agentId: string): Promise<V1Job | { skip: string }> {
  const name = agentJobName(agentId);
  const owner = pod.metadata?.ownerReferences?.find((o) => o.controller && o.kind === 'Job');
  if (!owner || owner.name !== name) return { skip: `it is not the pod of Job ${name}` };
  try {
    const job = await kc
      .makeApiClient(BatchV1Api)
      .readNamespacedJob({ name, namespace: pod.metadata?.namespace ?? '' });
    return job.metadata?.uid === owner.uid ? job : { skip: `it is not the pod of Job ${name}` };
  } catch (err) {
    return { skip: `its Job cannot be read (${apiErrorCode(err) ?? (err as Error).message})` };
  }
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

/**
 * A running agent (Job pod or ephemeral container) already serving this pod that this user may reuse, if any: one it
 * started (the creator recorded on the agent's Secret), or the one named by --reuse-agent; a Job pod only if owned by
 * the agent Job of its id, and the token only from that agent's own Secret (owned by the Job, or by the target pod). A
 * pod that merely carries the labels is never trusted.
 */
export async function findAgent(
  kc: KubeConfig,
  target: ResolvedTarget,
  options: Pick<AgentOptions, 'agentNamespace' | 'createdBy' | 'reuseAgent' | 'onSkip'>,
  agentPods?: Promise<V1Pod[]>,
): Promise<AgentEndpoint | undefined> {
  const { agentNamespace, reuseAgent } = options;
  const me = options.createdBy ?? (await clusterUser(kc));
  const skip = (name: string, why: string): undefined => {
    options.onSkip?.(name, why);
    return undefined;
  };
  const ephemeral = (target.pod.spec?.ephemeralContainers ?? []).filter((c) =>
    c.name.startsWith(`${AGENT_CONTAINER_NAME}-`),
  );
  // Newest first; the one asked for by name before any other.
  const named = (name: string): number => (name === reuseAgent ? 0 : 1);
  for (const c of ephemeral.reverse().sort((a, b) => named(a.name) - named(b.name))) {
    const status = target.pod.status?.ephemeralContainerStatuses?.find((s) => s.name === c.name);
    const port = Number(envValue(c.env, AGENT_ENV.port));
    const agentId = envValue(c.env, AGENT_ENV.agentId) ?? '';
    if (!isRunning(status) || !(port > 0) || !agentId) continue;
    const vetting = vetAgent(
      await readAgentSecret(kc, { namespace: target.namespace, agentId, env: c.env }),
      { name: c.name, ownerUid: target.podUid },
      me,
      reuseAgent,
    );
    if ('skip' in vetting) {
      skip(c.name, vetting.skip);
      continue;
    }
    return {
      mode: 'ephemeral',
      name: c.name,
      agentPod: target.podName,
      agentNamespace: target.namespace,
      agentContainer: c.name,
      port,
      ...nativePortIn(c.env),
      token: vetting.token,
      agentId,
      reused: true,
    };
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
    .sort(
      (a, b) =>
        named(agentJobName(a.metadata?.annotations?.[AGENT_ANNOTATIONS.agentId] ?? '')) -
          named(agentJobName(b.metadata?.annotations?.[AGENT_ANNOTATIONS.agentId] ?? '')) ||
        String(b.metadata?.creationTimestamp ?? '').localeCompare(String(a.metadata?.creationTimestamp ?? '')),
    );
  for (const pod of candidates) {
    const container = pod.spec?.containers.find((c) => c.name === AGENT_CONTAINER_NAME);
    const port = Number(
      envValue(container?.env, AGENT_ENV.port) ?? pod.metadata?.annotations?.[AGENT_ANNOTATIONS.port],
    );
    const agentId = pod.metadata?.annotations?.[AGENT_ANNOTATIONS.agentId] ?? '';
    if (!(port > 0) || !agentId) continue;
    const name = agentJobName(agentId);
    // The Secret is read beside the Job (one round trip, not two); it is trusted only once the Job is checked.
    const [job, secret] = await Promise.all([
      jobOfPod(kc, pod, agentId),
      readAgentSecret(kc, { namespace: agentNamespace, agentId, env: container?.env }),
    ]);
    if ('skip' in job) {
      skip(pod.metadata?.name ?? name, job.skip);
      continue;
    }
    const vetting = vetAgent(secret, { name, ownerUid: job.metadata?.uid ?? '' }, me, reuseAgent);
    if ('skip' in vetting) {
      skip(name, vetting.skip);
      continue;
    }
    return {
      mode: 'job',
      name,
      agentPod: pod.metadata?.name ?? '',
      agentNamespace,
      agentContainer: AGENT_CONTAINER_NAME,
      port,
      ...nativePortIn(container?.env),
      token: vetting.token,
      agentId,
      reused: true,
    };
  }
  return undefined;
}
