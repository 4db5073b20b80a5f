// The agent's pod specs, built by pure functions (tested against literal manifests): a Job pinned to the target's node
// (job mode) or an ephemeral container in the target pod (--ephemeral). Names and env come from
// shared/agent-contract.ts.
import type {
  V1EphemeralContainer,
  V1Job,
  V1ResourceRequirements,
  V1SecurityContext,
  V1Toleration,
} from '@kubernetes/client-node';
import {
  AGENT_ANNOTATIONS,
  AGENT_CAPABILITIES,
  AGENT_CONTAINER_NAME,
  AGENT_LABELS,
  agentEnv,
  nativePortOf,
} from '../../shared/agent-contract.js';

export interface AgentSpecInput {
  /** Short random id: Job name devop-agent-<id>, nft table devop_<id> (or iptables chain DEVOP-<id>). */
  agentId: string;
  /** Where the Job is created (default: the target's namespace). */
  namespace: string;
  image: string;
  port: number;
  token: string;
  target: { pod: string; uid: string; namespace: string; nodeName: string; containerId: string; container: string };
  /** Seconds the agent stays up without any session. */
  idleSeconds: number;
  /** ttlSecondsAfterFinished of the Job. */
  ttlSeconds: number;
  /** user@host of the CLI that created it. */
  owner: string;
  flush: boolean;
  privileged: boolean;
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

function securityContext(privileged: boolean): V1SecurityContext {
  return {
    privileged,
    runAsUser: 0,
    // Exactly what the agent uses: the runtime's default set would add a dozen it never needs.
    capabilities: { drop: ['ALL'], add: [...AGENT_CAPABILITIES] },
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
  };
}

export function buildAgentJob(input: AgentSpecInput): V1Job {
  const name = agentJobName(input.agentId);
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: { name, namespace: input.namespace, labels: labels(input), annotations: annotations(input) },
    // No activeDeadlineSeconds: a session may last a working day; the agent ends itself when its last session is gone.
    spec: {
      backoffLimit: 0,
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
          containers: [
            {
              name: AGENT_CONTAINER_NAME,
              image: input.image,
              imagePullPolicy: 'IfNotPresent',
              env: targetAgentEnv('job', input),
              securityContext: securityContext(input.privileged),
              resources: AGENT_RESOURCES,
            },
          ],
        },
      },
    },
  };
}

/** The env of an agent that serves a target container (job or ephemeral mode). */
function targetAgentEnv(mode: 'job' | 'ephemeral', input: AgentSpecInput): ReturnType<typeof agentEnv> {
  return agentEnv({
    mode,
    port: input.port,
    nativePort: nativePortOf(input.port),
    token: input.token,
    containerId: input.target.containerId,
    idleSeconds: input.idleSeconds,
    flushConnections: input.flush,
    agentId: input.agentId,
    logLevel: input.logLevel,
  });
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
    env: targetAgentEnv('ephemeral', input),
    securityContext: securityContext(input.privileged),
  };
}

export interface TargetlessAgentSpecInput {
  agentId: string;
  namespace: string;
  image: string;
  port: number;
  token: string;
  idleSeconds: number;
  ttlSeconds: number;
  owner: string;
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
  };
  return {
    apiVersion: 'batch/v1',
    kind: 'Job',
    metadata: { name, namespace: input.namespace, labels: podLabels, annotations: podAnnotations },
    spec: {
      backoffLimit: 0,
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
              env: agentEnv({
                mode: 'targetless',
                port: input.port,
                token: input.token,
                idleSeconds: input.idleSeconds,
                agentId: input.agentId,
                logLevel: input.logLevel,
              }),
              securityContext: TARGETLESS_SECURITY_CONTEXT,
              resources: AGENT_RESOURCES,
            },
          ],
        },
      },
    },
  };
}
