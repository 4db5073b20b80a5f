// What an agent start is asked for (AgentOptions) and what a session gets to reach the agent (AgentEndpoint): apart
// from agent.ts so that agent-reuse.ts, which agent.ts uses, can name them.
import type { AgentExtras } from './agent-manifest.js';

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
  /** The session mirrors: the agent it starts gets NET_RAW for the packet capture. */
  mirror?: boolean;
  owner: string;
  /** The cluster user (clusterUser); looked up when missing. */
  createdBy?: string;
  /** --reuse-agent: the one agent (Job or ephemeral container name) reused even if someone else started it. */
  reuseAgent?: string;
  /** Hears about a running agent of the target that is not reused, and why. */
  onSkip?: (agent: string, why: string) => void;
  logLevel?: 'debug' | 'info' | 'warn';
  extras?: AgentExtras;
  signal?: AbortSignal;
}
