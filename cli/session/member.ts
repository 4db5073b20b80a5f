// A member of a supervised session: one pod, its agent and the tunnel to it. How one is attached, whether its pod and
// its agent still live, and how a new agent is started for it.
import { CoreV1Api, type KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { createEphemeralAgent, createJobAgent, type AgentEndpoint, type AgentOptions } from '../kube/agent.js';
import { findAgent } from '../kube/agent-reuse.js';
import { apiErrorCode } from '../kube/errors.js';
import { resolveTarget, type ResolvedTarget } from '../kube/target.js';
import { type clientIdentity, connectAgent } from './connect.js';
import type { MemberLink } from './supervised-mux.js';

/**
 * How long one attempt to reach an existing agent keeps retrying refused dials. Short, so a dead agent is noticed soon
 * (its pod status is checked between attempts); a slow API server is not cut short: each attempt completes its
 * port-forward and handshake.
 */
export const ATTEMPT_MS = 1000;

export interface Member {
  target: ResolvedTarget;
  agent: AgentEndpoint;
  link: MemberLink;
  sessionId: string;
  /** Subscriptions the agent holds for this session (to tell a resumed session what changed). */
  sent: Map<number, string>;
  state: 'up' | 'reconnecting' | 'gone';
  /** The tunnel was opened by connectSession (its own pinger reports RTT). */
  original: boolean;
  agentVersion: string;
  stopLiveness?: () => void;
}

/** What every member of one session shares: the cluster, how its agents are made, who this client is. */
export interface MemberContext {
  kc: KubeConfig;
  agentOptions: AgentOptions;
  identity: ReturnType<typeof clientIdentity>;
  features?: string[];
  namespace: string;
  allowHostNetwork?: boolean;
  /** The session has ended: a tunnel opened after that is closed at once. */
  isOver(): boolean;
}

/** What the supervisor does with a member whose pod the watch reports. Pure. */
export function podFate(pod: V1Pod | undefined, uid: string): 'alive' | 'gone' {
  if (!pod || pod.metadata?.uid !== uid || pod.metadata?.deletionTimestamp) return 'gone';
  const phase = pod.status?.phase;
  return phase === 'Failed' || phase === 'Succeeded' ? 'gone' : 'alive';
}

export function startAgent(ctx: MemberContext, target: ResolvedTarget): Promise<AgentEndpoint> {
  return ctx.agentOptions.ephemeral
    ? createEphemeralAgent(ctx.kc, target, ctx.agentOptions)
    : createJobAgent(ctx.kc, target, ctx.agentOptions);
}

/** Whether the member's agent can still answer: its Job pod (or ephemeral container) runs. */
export async function agentState(ctx: MemberContext, member: Member): Promise<'running' | 'dead' | 'unknown'> {
  const { agent } = member;
  if (agent.mode === 'ephemeral') {
    const status = member.target.pod.status?.ephemeralContainerStatuses?.find((c) => c.name === agent.agentContainer);
    return status?.state?.terminated ? 'dead' : status?.state?.running ? 'running' : 'unknown';
  }
  try {
    const pod = await ctx.kc
      .makeApiClient(CoreV1Api)
      .readNamespacedPod({ name: agent.agentPod, namespace: agent.agentNamespace });
    const status = pod.status?.containerStatuses?.find((c) => c.name === agent.agentContainer);
    if (
      pod.metadata?.deletionTimestamp ||
      pod.status?.phase === 'Failed' ||
      pod.status?.phase === 'Succeeded' ||
      status?.state?.terminated
    )
      return 'dead';
    return 'running';
  } catch (err) {
    return apiErrorCode(err) === 404 ? 'dead' : 'unknown';
  }
}

/** Resolves `target` (one pod), reuses or starts its agent and opens a tunnel: a new member, not yet adopted. */
export async function attachPod(ctx: MemberContext, target: string): Promise<Member | undefined> {
  const resolved = await resolveTarget(ctx.kc, {
    target,
    namespace: ctx.namespace,
    allowHostNetwork: ctx.allowHostNetwork,
  });
  const existing = await findAgent(ctx.kc, resolved, ctx.agentOptions);
  let agent = existing ?? (await startAgent(ctx, resolved));
  let link: Awaited<ReturnType<typeof connectAgent>>;
  try {
    link = await connectAgent(ctx.kc, agent, resolved, {
      deadline: Date.now() + (existing ? ATTEMPT_MS : ctx.agentOptions.startupTimeoutMs),
      identity: ctx.identity,
      features: ctx.features,
    });
  } catch (err) {
    if (!existing) throw err;
    agent = await startAgent(ctx, resolved); // the reused agent was on its way out
    link = await connectAgent(ctx.kc, agent, resolved, {
      deadline: Date.now() + ctx.agentOptions.startupTimeoutMs,
      identity: ctx.identity,
      features: ctx.features,
    });
  }
  if (ctx.isOver()) {
    link.mux.close('session over');
    return undefined;
  }
  return {
    target: resolved,
    agent,
    link: { pod: resolved.podName, mux: link.mux, native: link.native },
    sessionId: link.hello.sessionId,
    sent: new Map(),
    state: 'up',
    original: false,
    agentVersion: link.hello.agentVersion,
  };
}
