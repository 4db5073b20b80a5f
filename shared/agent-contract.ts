// The CLI↔agent contract: env names, defaults, labels and the ready line, read by both the agent's start-up and the
// CLI's pod-spec builder. Changing a name here is a breaking change for agents already running in clusters.
// zod/mini: tree-shakable, so the agent bundle carries only what its schemas use (a smaller agent in memory).
import * as z from 'zod/mini';

export { AGENT_VERSION } from './version.js';
import { AGENT_VERSION } from './version.js';

/** The image the CLI puts in the agent's pod spec unless the user overrides it. */
export const AGENT_IMAGE = `ghcr.io/devop/agent:${AGENT_VERSION}`;
/** The container name of the agent (Job container or ephemeral container). */
export const AGENT_CONTAINER_NAME = 'devop-agent';
/**
 * Node flags the agent runs with, for its memory budget (60 MiB RSS with 1 000 stolen connections; bench/steal.ts):
 * a 1 MiB young generation (the agent allocates little per connection: a few more cheap scavenges) and V8's lite mode
 * (no optimizing compiler, whose code pages alone are ~7 MiB of RSS). Lite mode runs everything in the interpreter
 * (Sparkplug flags have no effect under it). Measured side by side (docs/agent.md): the agent's CPU per stolen request
 * and the added latency stay within noise of full V8, because its per-request work is mostly Node's native socket code.
 */
export const AGENT_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=1', '--lite-mode'];
/**
 * The port of the agent's native data path (devop-splice) for an agent whose control port is `port`: the next one. The
 * CLI picks both free (cli/kube/agent.ts) and opens both through one port-forward.
 */
export function nativePortOf(port: number): number {
  return port + 1;
}
/** Where the agent image keeps the bundle. */
export const AGENT_BUNDLE_PATH = '/opt/devop/agent.js';
/** The agent image runs the one-file bundle with plain Node (through AGENT_ENTRYPOINT, which writes it out in full). */
export const AGENT_COMMAND: readonly string[] = ['node', ...AGENT_NODE_FLAGS, AGENT_BUNDLE_PATH];
/**
 * The entry point's first step in job mode, `--target-pid`: the same bundle on Node's defaults. It runs for a moment
 * (its memory does not count), and under V8's default flags Node compiles its own modules from the code cache built
 * into its binary, which lite mode turns off (16–29 ms of every job-mode start on the slower test machine).
 */
export const AGENT_LOOKUP_COMMAND: readonly string[] = ['node', AGENT_BUNDLE_PATH];
/**
 * The image's entry point (agent/entry.sh): in job mode it runs AGENT_LOOKUP_COMMAND for the target's PID, then
 * AGENT_COMMAND inside the target's netns via nsenter.
 */
export const AGENT_ENTRYPOINT: readonly string[] = ['/bin/sh', '/opt/devop/entry.sh'];
/**
 * The argument of AGENT_COMMAND that makes it print the target's PID (job mode) and exit: the entry point's first step.
 */
export const TARGET_PID_ARG = '--target-pid';

/**
 * The Linux capabilities the agent's container gets — exactly these: the manifest drops every other one
 * (docs/agent.md), and each feature that needs one says so in one line when it is missing (agent/capabilities.ts). What
 * each is for:
 */
export const AGENT_CAPABILITY_USES = {
  NET_ADMIN:
    'the redirect rules of stolen ports (nftables/iptables) and moving existing connections (ss -K, conntrack)',
  NET_RAW:
    'the packet capture that mirrors a port (devop-capture: a packet socket); also the raw socket of ' +
    'iptables-legacy, whose rules an agent without it can neither read nor make (it then uses nftables: its owned ' +
    'table, or iptables-nft)',
  SYS_ADMIN: "entering the target pod's network namespace (setns)",
  SYS_PTRACE: "opening another process's /proc entries: the target's network namespace and its files (/proc/PID/root)",
  DAC_READ_SEARCH: 'reading the environment (/proc/PID/environ) and files of a target that runs as another user',
} as const;
export type AgentCapability = keyof typeof AGENT_CAPABILITY_USES;
export const AGENT_CAPABILITIES = Object.keys(AGENT_CAPABILITY_USES) as readonly AgentCapability[];

/**
 * The capabilities an agent is given, per mode (docs/safety.md has the table): an ephemeral container is already in
 * the target's netns (no setns, so no SYS_ADMIN); the packet capture that mirrors a port is the only user of NET_RAW,
 * so a session that does not mirror goes without it (a later mirror on that agent proxies instead of capturing). A
 * targetless agent only opens connections: none.
 */
export function agentCapabilities(mode: AgentMode, mirror: boolean): AgentCapability[] {
  if (mode === 'targetless') return [];
  return AGENT_CAPABILITIES.filter(
    (c) => (c !== 'SYS_ADMIN' || mode === 'job') && (c !== 'NET_RAW' || mirror),
  ) as AgentCapability[];
}

/** Labels and annotations the CLI puts on agent pods/Jobs and uses to find them again (`devop clean`, reuse). */
export const AGENT_LABELS = {
  name: 'app.kubernetes.io/name',
  nameValue: 'devop-agent',
  managedBy: 'app.kubernetes.io/managed-by',
  managedByValue: 'devop',
  targetPod: 'devop.dev/target-pod',
  targetUid: 'devop.dev/target-uid',
} as const;
export const AGENT_ANNOTATIONS = {
  /** The agent's control port inside the target pod's netns (the CLI port-forwards to the *target* pod on it). */
  port: 'devop.dev/agent-port',
  /** user@host of the CLI that created the agent. */
  owner: 'devop.dev/owner',
  /** The agent's id (its nft table is devop_<id>; with the iptables fallback, its chain is DEVOP-<id>). */
  agentId: 'devop.dev/agent-id',
  /**
   * The cluster user who created the agent (from a SelfSubjectReview, else the kubeconfig's user): an agent created by
   * someone else is not reused unless asked for by name.
   */
  createdBy: 'devop.dev/created-by',
} as const;

/**
 * The agent's token lives in a Secret of this name (one per agent, owned by the agent Job so that garbage collection
 * removes it; by the target pod in ephemeral mode), under AGENT_SECRET_KEY; the pod spec only refers to it.
 */
export function agentSecretName(agentId: string): string {
  return `devop-agent-${agentId}`;
}
export const AGENT_SECRET_KEY = 'token';

/** Environment variable names read by the agent (each one's meaning is in AGENT_ENV_DOC). */
export const AGENT_ENV = {
  mode: 'DEVOP_AGENT_MODE',
  port: 'DEVOP_AGENT_PORT',
  nativePort: 'DEVOP_AGENT_NATIVE_PORT',
  token: 'DEVOP_AGENT_TOKEN',
  containerId: 'DEVOP_AGENT_CONTAINER_ID',
  targetPid: 'DEVOP_AGENT_TARGET_PID',
  idleSeconds: 'DEVOP_AGENT_IDLE_SECONDS',
  resumeGraceSeconds: 'DEVOP_AGENT_RESUME_GRACE_SECONDS',
  nodeIP: 'DEVOP_AGENT_NODE_IP',
  iptables: 'DEVOP_AGENT_IPTABLES',
  flushConnections: 'DEVOP_AGENT_FLUSH_CONNECTIONS',
  mirror: 'DEVOP_AGENT_MIRROR',
  agentId: 'DEVOP_AGENT_ID',
  logLevel: 'DEVOP_AGENT_LOG_LEVEL',
  /** Set by the agent itself (or its image's entry point) on the agent that runs inside the target netns (job mode). */
  inNetns: 'DEVOP_AGENT_IN_NETNS',
  /** Set by an agent that stays as the parent of the one it re-executes: the child watches this fd for its end. */
  parentPipe: 'DEVOP_AGENT_PARENT_PIPE',
} as const;

export const AGENT_ENV_DOC: Record<keyof typeof AGENT_ENV, string> = {
  mode:
    'job (hostPID pod on the target node; finds the target by container ID and enters its netns), ephemeral (an ' +
    'ephemeral container already in the netns) or targetless (outgoing/DNS only).',
  port:
    'TCP port of the control listener on 127.0.0.1 inside the target pod netns; 0 picks a free one (printed in ' +
    'the ready line).',
  nativePort:
    'TCP port on 127.0.0.1 of the native data path (devop-splice), which whole steals use when the session joins it; ' +
    '0 picks a free one, unset runs without it (every stolen connection goes through the agent itself).',
  token:
    'Secret every session must present in its Hello. The CLI puts it in a Secret of its own (agentSecretName) and ' +
    'the pod spec refers to it (secretKeyRef): kubelet sets it, the spec never holds it.',
  containerId: 'Target container ID as in pod status (containerd://…, cri-o://…, docker://… or bare hex).',
  targetPid: 'Target PID when already known (tests, ephemeral mode); skips the /proc/*/cgroup scan.',
  idleSeconds: 'Exit after this many seconds without any connected session (never while one is connected).',
  resumeGraceSeconds:
    'How long a disconnected session keeps its steals (traffic goes to the pod meanwhile) waiting for a resume.',
  nodeIP: "The node's IP (kubelet probes come from it and are not stolen); default: the pod's default gateway.",
  iptables:
    'Where the redirect rules go: auto (an owned nftables table when the kernel supports it, else iptables ' +
    'with the backend that already has rules in the pod netns), nft-owned (owned table only: without it steals are ' +
    'refused with the reason), nft (iptables-nft + guard) or legacy (iptables-legacy + guard).',
  flushConnections:
    "false forbids flushing existing connections when stealing starts (a session's flush request is then ignored); " +
    'default true.',
  mirror:
    "Where mirror copies come from: capture (default: a packet capture, the agent stays out of the pod's traffic; " +
    'when the capture cannot start, e.g. without NET_RAW, the agent falls back to proxy) or proxy (the port is ' +
    'redirected to the agent, which forwards each connection to the app and copies it).',
  agentId: 'Id of this agent (nft table devop_<id>, or iptables chain DEVOP-<id> in the fallback); default: random.',
  logLevel: 'debug, info or warn.',
  inNetns: 'Internal: marks the agent that runs inside the target netns in job mode.',
  parentPipe:
    'Internal: the file descriptor of the pipe from the parent agent (re-executed agent in job mode, outside the ' +
    'image).',
};

export const AgentMode = z.enum(['job', 'ephemeral', 'targetless']);
export type AgentMode = z.infer<typeof AgentMode>;

const bool = z.pipe(
  z.enum(['true', 'false', '1', '0']),
  z.transform((v) => v === 'true' || v === '1'),
);
/** A number from an env string, validated by `schema`. */
const fromEnv = <T extends z.ZodMiniType<number, number>>(schema: T) => z.pipe(z.coerce.number(), schema);

/** The agent's configuration as parsed from its environment. */
export const AgentConfig = z.object({
  mode: z._default(AgentMode, 'job'),
  port: z._default(fromEnv(z.int().check(z.minimum(0), z.maximum(65535))), 0),
  nativePort: z.optional(fromEnv(z.int().check(z.minimum(0), z.maximum(65535)))),
  token: z.string().check(z.minLength(1)),
  containerId: z.optional(z.string().check(z.minLength(1))),
  targetPid: z.optional(fromEnv(z.int().check(z.positive()))),
  idleSeconds: z._default(fromEnv(z.number().check(z.positive())), 60),
  resumeGraceSeconds: z._default(fromEnv(z.number().check(z.minimum(0))), 30),
  nodeIP: z.optional(z.string().check(z.minLength(1))),
  iptables: z._default(z.enum(['auto', 'nft-owned', 'nft', 'legacy']), 'auto'),
  flushConnections: z._default(bool, true),
  mirror: z._default(z.enum(['capture', 'proxy']), 'capture'),
  agentId: z.optional(
    z
      .string()
      .check(z.regex(/^[a-z0-9]{1,20}$/, 'lower-case letters and digits, at most 20 (iptables chain names are short)')),
  ),
  logLevel: z._default(z.enum(['debug', 'info', 'warn']), 'info'),
  inNetns: z._default(bool, false),
  parentPipe: z.optional(fromEnv(z.int().check(z.minimum(3)))),
});
export type AgentConfig = z.infer<typeof AgentConfig>;
export type AgentConfigInput = z.input<typeof AgentConfig>;

/** Reads the agent's config from an environment; throws a ZodError naming the bad variable. */
export function parseAgentEnv(env: Record<string, string | undefined>): AgentConfig {
  const raw: Record<string, string> = {};
  for (const [key, name] of Object.entries(AGENT_ENV)) {
    const value = env[name];
    if (value !== undefined && value !== '') raw[key] = value;
  }
  return AgentConfig.parse(raw);
}

/** An agent container's env entry: a plain value, or the token, read by kubelet from the agent's Secret. */
export type AgentEnvVar =
  | { name: string; value: string }
  | { name: string; valueFrom: { secretKeyRef: { name: string; key: string } } };

/**
 * The env list for the agent's container spec (what the CLI's pod-spec builder writes). The token is never a value
 * here: with `tokenSecret`, DEVOP_AGENT_TOKEN refers to that Secret (secretKeyRef), so whoever reads pods or Jobs (or
 * the audit log of their creation) does not learn it.
 */
export function agentEnv(
  config: Partial<Record<Exclude<keyof typeof AGENT_ENV, 'token'>, string | number | boolean>>,
  tokenSecret?: string,
): AgentEnvVar[] {
  const out: AgentEnvVar[] = [];
  for (const [key, name] of Object.entries(AGENT_ENV) as [keyof typeof AGENT_ENV, string][]) {
    if (key === 'token') {
      if (tokenSecret) out.push({ name, valueFrom: { secretKeyRef: { name: tokenSecret, key: AGENT_SECRET_KEY } } });
      continue;
    }
    const value = config[key];
    if (value !== undefined) out.push({ name, value: String(value) });
  }
  return out;
}

/** Strips the runtime prefix of a container ID: `containerd://abc…` → `abc…`. */
export function bareContainerId(id: string): string {
  const i = id.indexOf('://');
  return i >= 0 ? id.slice(i + 3) : id;
}

/** The one line the agent prints on stdout once its control listener accepts sessions. */
export const ReadyLine = z.object({
  msg: z.literal('ready'),
  version: z.string(),
  port: z.int(),
  /** The native data path's port, when it runs. */
  nativePort: z.optional(z.int()),
  agentId: z.string(),
  pid: z.optional(z.int()),
});
export type ReadyLine = z.infer<typeof ReadyLine>;

export function formatReadyLine(ready: Omit<ReadyLine, 'msg'>): string {
  return JSON.stringify({ msg: 'ready', ...ready });
}

/** Parses one stdout line of the agent: the ready line, or undefined for a log line / anything else. */
export function parseReadyLine(line: string): ReadyLine | undefined {
  try {
    const parsed = ReadyLine.safeParse(JSON.parse(line));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

/** iptables chain name of an agent; stale chains (owner dead) match CHAIN_PREFIX. */
export const CHAIN_PREFIX = 'DEVOP-';
export function chainName(agentId: string): string {
  return `${CHAIN_PREFIX}${agentId}`.slice(0, 28);
}
