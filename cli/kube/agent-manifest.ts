// The agent's pod specs, built by pure functions (tested against literal manifests): a Job pinned to the target's node
// (job mode) or an ephemeral container in the target pod (--ephemeral), and the Secret that holds the agent's token
// (the specs only refer to it). Names and env come from shared/agent-contract.ts.
import type {
  V1EphemeralContainer,
  V1Job,
  V1OwnerReference,
  V1ResourceRequirements,
  V1Secret,
  V1SecurityContext,
  V1Toleration,
} from '@kubernetes/client-node';
import {
  AGENT_ANNOTATIONS,
  AGENT_CONTAINER_NAME,
  AGENT_LABELS,
  AGENT_SECRET_KEY,
  agentCapabilities,
  agentEnv,
  agentSecretName,
  nativePortOf,
  type AgentEnvVar,
} from '../../shared/agent-contract.js';

export interface AgentSpecInput {
  /** Short random id: Job name devop-agent-<id>, nft table devop_<id> (or iptables chain DEVOP-<id>). */
  agentId: string;
  /** Where the Job is created (default: the target's namespace). */
  namespace: string;
  image: string;
  port: number;
  target: { pod: string; uid: string; namespace: string; nodeName: string; containerId: string; container: string };
  /** Seconds the agent stays up without any session. */
  idleSeconds: number;
  /** ttlSecondsAfterFinished of the Job. */
  ttlSeconds: number;
  /** user@host of the CLI that created it. */
  owner: string;
  /** The cluster user who created it (SelfSubjectReview, else the kubeconfig's user). */
  createdBy: string;
  flush: boolean;
  privileged: boolean;
  /** The session mirrors a port: the agent gets NET_RAW for the packet capture. */
  mirror: boolean;
  logLevel?: 'debug' | 'info' | 'warn';
  /** From devop.json agent.labels / agent.annotations / agent.tolerations. */
  extras?: AgentExtras;
}

export interface AgentExtras {
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  /** Replace the default (tolerate every taint) when given. */
  tolerations?: V1Toleration[];
}

/** The agent must run wherever the target runs, whatever the node's taints. */
export const TOLERATE_EVERYTHING: V1Toleration[] = [{ operator: 'Exists' }];

/**
 * The agent is small (one Node process); limits keep a runaway agent from starving the node, requests let it schedule
 * on a full node. 60 MiB is the design's RSS budget with 1 000 connections: the limit leaves room above it.
 */
export const AGENT_RESOURCES: V1ResourceRequirements = {
  requests: { cpu: '10m', memory: '48Mi' },
  limits: { cpu: '1', memory: '256Mi' },
};

export function agentJobName(agentId: string): string {
  return `devop-agent-${agentId}`;
}

/**
 * How long an agent Job may exist at all (activeDeadlineSeconds): a Job whose pod never started (devop was killed
 * while it was pending, or before it made the token's Secret) then fails, and its ttlSecondsAfterFinished (--agent-ttl)
 * removes it with its pod and Secret. A running agent ends itself within idleSeconds of its last session, so the
 * deadline only bounds sessions: 24 h, a working day with margin (a longer session is reconnected to a new agent by the
 * supervisor).
 */
export const AGENT_ACTIVE_DEADLINE_SECONDS = 24 * 60 * 60;

/** Where iptables' legacy backend writes its lock file (/run/xtables.lock): the only path the agent writes. */
const RUN_VOLUME = { name: 'run', mountPath: '/run' };
/**
 * An ephemeral container cannot add a volume to its pod: iptables takes its lock under /dev, the container's own
 * tmpfs (the read-only root does not cover it), through its XTABLES_LOCKFILE variable.
 */
const EPHEMERAL_XTABLES_LOCK = { name: 'XTABLES_LOCKFILE', value: '/dev/xtables.lock' };

function securityContext(mode: 'job' | 'ephemeral', input: AgentSpecInput): V1SecurityContext {
  // Exactly what the agent uses in this mode: the runtime's default set would add a dozen it never needs.
  const capabilities = { drop: ['ALL'], add: agentCapabilities(mode, input.mirror) };
  if (input.privileged) return { privileged: true, runAsUser: 0, capabilities };
  return {
    privileged: false,
    runAsUser: 0,
    // Job mode holds SYS_ADMIN (to enter the netns): no_new_privs bounds nothing for a holder of it, and Kubernetes'
    // validation refuses the pair (pkg/apis/core/validation: "cannot set `allowPrivilegeEscalation` to false and
    // `capabilities.Add` CAP_SYS_ADMIN"; it only sees that spelling, so the pair is not slipped past it either).
    ...(mode === 'ephemeral' ? { allowPrivilegeEscalation: false } : {}),
    readOnlyRootFilesystem: true,
    seccompProfile: { type: 'RuntimeDefault' },
    capabilities,
  };
}

function labels(input: AgentSpecInput): Record<string, string> {
  return {
    ...input.extras?.labels,
    [AGENT_LABELS.name]: AGENT_LABELS.nameValue,
    [AGENT_LABELS.managedBy]: AGENT_LABELS.managedByValue,
    [AGENT_LABELS.targetPod]: input.target.pod,
    [AGENT_LABELS.targetUid]: input.target.uid,
  };
}

function annotations(input: AgentSpecInput): Record<string, string> {
  return {
    ...input.extras?.annotations,
    [AGENT_ANNOTATIONS.port]: String(input.port),
    [AGENT_ANNOTATIONS.owner]: input.owner,
    [AGENT_ANNOTATIONS.agentId]: input.agentId,
    [AGENT_ANNOTATIONS.createdBy]: input.createdBy,
  };
}

export function buildAgentJob(input: AgentSpecInput): V1Job {
  const name = agentJobName(input.agentId);
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: { name, namespace: input.namespace, labels: labels(input), annotations: annotations(input) },
    spec: {
      backoffLimit: 0,
      activeDeadlineSeconds: AGENT_ACTIVE_DEADLINE_SECONDS,
      ttlSecondsAfterFinished: input.ttlSeconds,
      template: {
        metadata: {
          labels: labels(input),
          annotations: {
            ...annotations(input),
            // A sidecar would hold the Job open after the agent ends and intercept the agent's own traffic.
            'sidecar.istio.io/inject': 'false',
            'linkerd.io/inject': 'disabled',
          },
        },
        spec: {
          nodeName: input.target.nodeName,
          hostPID: true,
          restartPolicy: 'Never',
          terminationGracePeriodSeconds: 2,
          automountServiceAccountToken: false,
          tolerations: input.extras?.tolerations?.length ? input.extras.tolerations : TOLERATE_EVERYTHING,
          volumes: [{ name: RUN_VOLUME.name, emptyDir: { medium: 'Memory', sizeLimit: '1Mi' } }],
          containers: [
            {
              name: AGENT_CONTAINER_NAME,
              image: input.image,
              imagePullPolicy: 'IfNotPresent',
              env: targetAgentEnv('job', input),
              securityContext: securityContext('job', input),
              resources: AGENT_RESOURCES,
              volumeMounts: [RUN_VOLUME],
            },
          ],
        },
      },
    },
  };
}

/** The env of an agent that serves a target container (job or ephemeral mode). */
function targetAgentEnv(mode: 'job' | 'ephemeral', input: AgentSpecInput): AgentEnvVar[] {
  return agentEnv(
    {
      mode,
      port: input.port,
      nativePort: nativePortOf(input.port),
      containerId: input.target.containerId,
      idleSeconds: input.idleSeconds,
      flushConnections: input.flush,
      agentId: input.agentId,
      logLevel: input.logLevel,
    },
    agentSecretName(input.agentId),
  );
}

export function agentEphemeralName(agentId: string): string {
  return `${AGENT_CONTAINER_NAME}-${agentId}`;
}

export function buildAgentEphemeralContainer(input: AgentSpecInput): V1EphemeralContainer {
  return {
    name: agentEphemeralName(input.agentId),
    image: input.image,
    imagePullPolicy: 'IfNotPresent',
    targetContainerName: input.target.container,
    env: [...targetAgentEnv('ephemeral', input), ...(input.privileged ? [] : [EPHEMERAL_XTABLES_LOCK])],
    securityContext: securityContext('ephemeral', input),
  };
}

/** What owns an agent's Secret: its Job, or in ephemeral mode the target pod (an ephemeral container has no object). */
export interface SecretOwner {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
}

/**
 * The Secret that holds an agent's token. Owned (ownerReferences) by the agent's Job, or by the target pod in ephemeral
 * mode, so that garbage collection removes it with them; no blockOwnerDeletion (setting it needs update rights on the
 * owner's finalizers, which a session does not need otherwise).
 */
export function buildAgentSecret(input: {
  agentId: string;
  namespace: string;
  token: string;
  owner: SecretOwner;
  createdBy: string;
  labels?: Record<string, string>;
}): V1Secret {
  const ownerReference: V1OwnerReference = {
    apiVersion: input.owner.apiVersion,
    kind: input.owner.kind,
    name: input.owner.name,
    uid: input.owner.uid,
  };
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: {
      name: agentSecretName(input.agentId),
      namespace: input.namespace,
      labels: {
        ...input.labels,
        [AGENT_LABELS.name]: AGENT_LABELS.nameValue,
        [AGENT_LABELS.managedBy]: AGENT_LABELS.managedByValue,
      },
      annotations: { [AGENT_ANNOTATIONS.agentId]: input.agentId, [AGENT_ANNOTATIONS.createdBy]: input.createdBy },
      ownerReferences: [ownerReference],
    },
    type: 'Opaque',
    immutable: true,
    data: { [AGENT_SECRET_KEY]: Buffer.from(input.token, 'utf8').toString('base64') },
  };
}

export interface TargetlessAgentSpecInput {
  agentId: string;
  namespace: string;
  image: string;
  port: number;
  idleSeconds: number;
  ttlSeconds: number;
  owner: string;
  createdBy: string;
  logLevel?: 'debug' | 'info' | 'warn';
}

/** Value of the target-pod label on a targetless agent (it serves outgoing traffic and DNS only). */
export const TARGETLESS_LABEL_VALUE = 'targetless';

/**
 * A targetless agent only opens connections and resolves names: it runs as nobody with no capability at all, which the
 * "restricted" Pod Security Standard admits.
 */
export const TARGETLESS_SECURITY_CONTEXT: V1SecurityContext = {
  runAsNonRoot: true,
  runAsUser: 65534,
  allowPrivilegeEscalation: false,
  readOnlyRootFilesystem: true,
  capabilities: { drop: ['ALL'] },
  seccompProfile: { type: 'RuntimeDefault' },
};

/**
 * A targetless agent: an ordinary pod (no host access, no capabilities) that opens outgoing connections and resolves
 * names.
 */
export function buildTargetlessAgentJob(input: TargetlessAgentSpecInput): V1Job {
  const name = agentJobName(input.agentId);
  const podLabels = {
    [AGENT_LABELS.name]: AGENT_LABELS.nameValue,
    [AGENT_LABELS.managedBy]: AGENT_LABELS.managedByValue,
    [AGENT_LABELS.targetPod]: TARGETLESS_LABEL_VALUE,
  };
  const podAnnotations = {
    [AGENT_ANNOTATIONS.port]: String(input.port),
    [AGENT_ANNOTATIONS.owner]: input.owner,
    [AGENT_ANNOTATIONS.agentId]: input.agentId,
    [AGENT_ANNOTATIONS.createdBy]: input.createdBy,
  };
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: { name, namespace: input.namespace, labels: podLabels, annotations: podAnnotations },
    spec: {
      backoffLimit: 0,
      activeDeadlineSeconds: AGENT_ACTIVE_DEADLINE_SECONDS,
      ttlSecondsAfterFinished: input.ttlSeconds,
      template: {
        metadata: {
          labels: podLabels,
          annotations: { ...podAnnotations, 'sidecar.istio.io/inject': 'false', 'linkerd.io/inject': 'disabled' },
        },
        spec: {
          restartPolicy: 'Never',
          terminationGracePeriodSeconds: 2,
          automountServiceAccountToken: false,
          containers: [
            {
              name: AGENT_CONTAINER_NAME,
              image: input.image,
              imagePullPolicy: 'IfNotPresent',
              env: agentEnv(
                {
                  mode: 'targetless',
                  port: input.port,
                  idleSeconds: input.idleSeconds,
                  agentId: input.agentId,
                  logLevel: input.logLevel,
                },
                agentSecretName(input.agentId),
              ),
              securityContext: TARGETLESS_SECURITY_CONTEXT,
              resources: AGENT_RESOURCES,
            },
          ],
        },
      },
    },
  };
}
