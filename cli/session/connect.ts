// connectSession: resolve the target (or go targetless) → reuse or start an agent → open the one tunnel → handshake.
// The reusable core of `devop exec`, `devop port-forward`, `devop doctor` and the reliability work.
import { hostname, userInfo } from 'node:os';
import type { Duplex } from 'node:stream';
import type { KubeConfig, V1Pod } from '@kubernetes/client-node';
import { OPTIONS } from '../config/options.js';
import { AGENT_IMAGE, AGENT_VERSION } from '../../shared/agent-contract.js';
import { errorMessage, isUserError, UserError } from '../../shared/errors.js';
import { clientHello } from '../../shared/handshake.js';
import { createClientMux, type ClientMux } from '../../shared/mux.js';
import { FEATURES, type HelloOk } from '../../shared/protocol.js';
import { parseTarget } from '../../shared/target.js';
import { debug, formatWebhooks, info, type Reporter, step, warn } from '../reporter.js';
import { assertAccess, sessionAccessChecks } from '../kube/access.js';
import { loadKubeConfig, type KubeAccessOptions } from '../kube/config.js';
import { openPortForwards, PortForwardError } from '../kube/tunnel.js';
import { apiErrorCode } from '../kube/errors.js';
import type { SessionTunnel } from './tunnel.js';
import { clusterUser, findAgent, listAgentPods } from '../kube/agent-reuse.js';
import {
  createEphemeralAgent,
  createJobAgent,
  createTargetlessAgent,
  type AgentEndpoint,
  type AgentOptions,
} from '../kube/agent.js';
import type { AgentExtras } from '../kube/agent-manifest.js';
import { hostNetworkWarning, namesClusterScoped, resolveTarget, type ResolvedTarget } from '../kube/target.js';

/** Defaults shared by every command that starts a session (each is also a devop.json key / flag). */
export const SESSION_DEFAULTS = {
  agentImage: AGENT_IMAGE,
  // devop.json's defaults (agent.ttlSeconds, agent.startupTimeoutSeconds), for callers that pass no config.
  agentTtlSeconds: OPTIONS.agentTtl.default,
  startupTimeoutMs: OPTIONS.startupTimeout.default * 1000,
  /**
   * The agent exits this long after its last session ends: short, so nothing keeps running in the cluster, yet long
   * enough for a quick re-run to reuse it (the second session skips the agent start-up).
   */
  agentIdleSeconds: 10,
} as const;

/** How long a reused agent gets to accept the tunnel before devop starts a fresh one (it may just be exiting idle). */
const REUSE_CONNECT_MS = 3000;
/**
 * Between tunnel attempts while a new agent starts listening (kubelet's dial is refused until then): its Node starts
 * listening 0.1–0.3 s after the container does, so the first half second tries every 25 ms (a refused attempt is one
 * port-forward upgrade), and every 100 ms after that.
 */
const CONNECT_RETRY_MS = { early: 25, earlyFor: 500, later: 100 } as const;
/** Keep-alive and RTT measurement on the tunnel. */
const PING_INTERVAL_MS = 5000;

export interface SessionOptions extends KubeAccessOptions {
  /** Target string (`deploy/x`, …); undefined or "targetless" for a targetless agent. */
  target?: string;
  namespace?: string;
  agentImage?: string;
  agentNamespace?: string;
  ephemeral?: boolean;
  agentTtlSeconds?: number;
  agentIdleSeconds?: number;
  startupTimeoutMs?: number;
  flush?: boolean;
  agentPrivileged?: boolean;
  /** steal or mirror: a mirroring session's agent gets NET_RAW for its packet capture. */
  mode?: 'steal' | 'mirror';
  /** --reuse-agent: the agent (Job or ephemeral container name) reused even if another user started it. */
  reuseAgent?: string;
  /** devop.json agent.labels / annotations / tolerations. */
  agentExtras?: AgentExtras;
  /** Steal/mirror on every Ready pod of a deploy/sts target (cli/session/supervisor.ts). */
  allPods?: boolean;
  /** Take a pod on its node's network (hostNetwork: true), with a warning; refused otherwise. */
  allowHostNetwork?: boolean;
  /** Skip the RBAC preflight (e.g. doctor runs its own). */
  skipPreflight?: boolean;
  /** Features this client announces in hello. */
  features?: string[];
  verbose?: boolean;
  signal?: AbortSignal;
  /** An already loaded kubeconfig (then kubeconfig/context are ignored). */
  kc?: KubeConfig;
}

export interface Session {
  kc: KubeConfig;
  namespace: string;
  target?: ResolvedTarget;
  agent: AgentEndpoint;
  /** The one tunnel to the agent(s): direct here, supervised (reconnecting, all pods) from connectSupervisedSession. */
  tunnel: SessionTunnel;
  /** The agent's native data path (native-splice), when it joined: outgoing connections to addresses go there. */
  native?: ClientMux;
  hello: HelloOk;
  /** Ends the session: bye, close the tunnel. Safe to call twice. */
  close(reason?: string): Promise<void>;
  /** Hears when the session moves to another pod (its pod was replaced: the supervisor follows the target). */
  onRetarget?(listener: (change: Retarget) => void): void;
  /** Hears when the session is stopped from outside: its steal lock was deleted (`devop sessions stop`). */
  onStopped?(listener: (reason: string) => void): void;
  /** The pods the session holds now (several with --all-pods or an extension target). */
  podNames?(): string[];
  /** Starts taking the steal locks of ports an unfiltered steal will subscribe (see StealGate.lockAhead). */
  lockAhead?(ports: readonly number[]): void;
}

/**
 * Something the local command's env needs besides the pod's: started with the session while the pod's env is still
 * being read (a proxy, a directory), then given the env, in the order of the hooks, to add to it.
 */
export type ChildEnvHook = (ctx: { session: Session; reporter: Reporter }) => Promise<StartedEnvHook>;

export interface StartedEnvHook {
  /** The env with this hook's additions (given the pod's env, the user's choices and the earlier hooks'). */
  apply(env: Record<string, string>): Record<string, string> | Promise<Record<string, string>>;
  cleanup?: () => Promise<void>;
  /**
   * A program the command is started under, e.g. dist/devop-netns (`--outgoing-netns`), given the local ports traffic
   * goes to; the command follows it.
   */
  launcher?: (localPorts: readonly number[]) => string[];
}

/** Where a followed session went: the new pod and the agent that serves it. */
export interface Retarget {
  target: ResolvedTarget;
  agent: AgentEndpoint;
  agentVersion: string;
}

export function clientIdentity(): { user: string; host: string; pid: number; devopVersion: string } {
  let user = process.env.USER ?? 'unknown';
  try {
    user = userInfo().username;
  } catch {
    // no passwd entry (containers): keep $USER
  }
  return { user, host: hostname(), pid: process.pid, devopVersion: AGENT_VERSION };
}

/** How this session's agents run: the options with their defaults, owned by user@host. */
export function agentOptionsFor(
  options: SessionOptions,
  agentNamespace: string,
  identity: { user: string; host: string },
): AgentOptions {
  return {
    image: options.agentImage ?? SESSION_DEFAULTS.agentImage,
    agentNamespace,
    ephemeral: options.ephemeral ?? false,
    ttlSeconds: options.agentTtlSeconds ?? SESSION_DEFAULTS.agentTtlSeconds,
    idleSeconds: options.agentIdleSeconds ?? SESSION_DEFAULTS.agentIdleSeconds,
    startupTimeoutMs: options.startupTimeoutMs ?? SESSION_DEFAULTS.startupTimeoutMs,
    flush: options.flush ?? true,
    privileged: options.agentPrivileged ?? false,
    mirror: options.mode === 'mirror',
    reuseAgent: options.reuseAgent,
    owner: `${identity.user}@${identity.host}`,
    logLevel: options.verbose ? 'debug' : undefined,
    extras: options.agentExtras,
  };
}

export async function connectSession(options: SessionOptions, reporter: Reporter): Promise<Session> {
  const loaded = options.kc ? undefined : loadKubeConfig(options);
  const kc = options.kc ?? loaded!.kc;
  const namespace = options.namespace ?? loaded?.namespace ?? 'default';
  const parsed = parseTarget(options.target ?? 'targetless');
  const targetless = parsed.kind === 'targetless';
  // An APIService's or a webhook configuration's pods are in its Service's namespace, known once it is resolved: the
  // session, the RBAC preflight and the agent are there, not in -n.
  const clusterScoped = namesClusterScoped(options.target ?? 'targetless');
  const ephemeral = options.ephemeral ?? false;
  const identity = clientIdentity();
  const user = kc.getCurrentUser()?.name ?? 'the current user';
  // Who the cluster says we are: recorded on the agent devop starts, and compared before reusing one.
  const creator = clusterUser(kc);
  const preflight = (ns: string, agentNs: string, asEphemeral: boolean): Promise<void> =>
    options.skipPreflight
      ? Promise.resolve()
      : assertAccess(kc, sessionAccessChecks({ namespace: ns, agentNamespace: agentNs, ephemeral: asEphemeral }), user);

  // Listed beside the target lookup when the namespace is known before it: finding an agent to reuse then costs no
  // extra round trip.
  const listAgents = (ns: string): Promise<V1Pod[]> => {
    const listed = listAgentPods(kc, ns);
    listed.catch(() => undefined);
    return listed;
  };
  const earlyAgentPods =
    targetless || ephemeral || clusterScoped ? undefined : listAgents(options.agentNamespace ?? namespace);
  // The title starts with "resolve target": the VS Code task's beginsPattern (cli/ui/lines.ts) waits for it.
  const target = targetless
    ? await step(
        reporter,
        'target',
        'resolve target: targetless',
        async () => {
          const agentNamespace = options.agentNamespace ?? namespace;
          await preflight(agentNamespace, agentNamespace, false);
          return undefined;
        },
        () => 'no target pod: outgoing traffic and DNS only',
      )
    : await step(
        reporter,
        'target',
        `resolve target ${options.target}`,
        async () => {
          const input = { target: options.target ?? '', namespace, allowHostNetwork: options.allowHostNetwork };
          if (clusterScoped) {
            const resolved = await resolveTarget(kc, input);
            await preflight(resolved.namespace, options.agentNamespace ?? resolved.namespace, ephemeral);
            return resolved;
          }
          // The RBAC preflight runs beside the lookup; a denial is the better message when both fail.
          const [access, resolved] = await Promise.allSettled([
            preflight(namespace, options.agentNamespace ?? namespace, ephemeral),
            resolveTarget(kc, input),
          ]);
          if (access.status === 'rejected' && (isUserError(access.reason) || resolved.status === 'rejected'))
            throw access.reason;
          if (resolved.status === 'rejected') throw resolved.reason;
          return resolved.value;
        },
        (t) =>
          `pod ${t!.podName} (${t!.podReason}), container ${t!.container.name} (${t!.containerReason}), ` +
          `node ${t!.nodeName}${t!.webhooks ? `; ${formatWebhooks(t!.webhooks)}` : ''}`,
      );
  if (target?.hostNetwork) warn(reporter, hostNetworkWarning(target));
  const sessionNamespace = target?.namespace ?? namespace;
  const agentNamespace = options.agentNamespace ?? sessionNamespace;
  const agentOptions: AgentOptions = {
    ...agentOptionsFor(options, agentNamespace, identity),
    createdBy: await creator,
    onSkip: (name, why) => info(reporter, `agent ${name} not reused: ${why}`),
    signal: options.signal,
  };
  const agentPods = earlyAgentPods ?? (target && !ephemeral ? listAgents(agentNamespace) : undefined);

  const { agent, mux, hello, native } = await step(
    reporter,
    'agent',
    target ? `agent for pod ${target.podName}` : 'targetless agent',
    async () => {
      if (target) {
        const existing = await findAgent(kc, target, agentOptions, agentPods);
        const named = agentOptions.reuseAgent;
        if (named && existing?.name !== named)
          warn(
            reporter,
            `--reuse-agent ${named}: no such agent runs for pod ${target.podName}; ` +
              `${existing ? `reusing ${existing.name}` : 'starting a new one'}`,
          );
        if (existing) {
          try {
            const link = await connectAgent(kc, existing, target, {
              deadline: Date.now() + REUSE_CONNECT_MS,
              identity,
              features: options.features,
            });
            return { agent: existing, ...link };
          } catch (err) {
            if (isUserError(err) && /protocol version|token/.test(err.message)) throw err;
            debug(
              reporter,
              `agent ${existing.name} did not accept the session (${(err as Error).message}); starting a new one`,
            );
          }
        }
      }
      const created = target
        ? agentOptions.ephemeral
          ? await createEphemeralAgent(kc, target, agentOptions)
          : await createJobAgent(kc, target, agentOptions)
        : await createTargetlessAgent(kc, agentOptions);
      const link = await connectAgent(kc, created, target, {
        deadline: Date.now() + agentOptions.startupTimeoutMs,
        identity,
        features: options.features,
      });
      return { agent: created, ...link };
    },
    (v) =>
      `${v.agent.reused ? 'reused' : 'started'} ${v.agent.mode === 'ephemeral' ? 'ephemeral container' : 'Job'} ` +
      `${v.agent.name} (agent ${v.hello.agentVersion}), tunnel to ` +
      `${v.agent.mode === 'job' && target ? target.podName : v.agent.agentPod}:${v.agent.port}`,
  );

  const pinger = startPinger(mux, reporter);
  let closed = false;
  return {
    kc,
    namespace: sessionNamespace,
    target,
    agent,
    tunnel: mux,
    ...(native ? { native } : {}),
    hello,
    async close(reason = 'session ended') {
      if (closed) return;
      closed = true;
      clearInterval(pinger);
      if (!mux.closed) {
        mux.send({ type: 'bye', reason });
        await waitClosed(mux, 1000);
        mux.close(reason);
      }
    },
  };
}

/** Gives the agent a moment to read our bye and close its end first (so the GOAWAY is not needed). */
function waitClosed(mux: ClientMux, ms: number): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    mux.once('close', () => {
      clearTimeout(timer);
      resolve();
    });
    mux.once('message', (msg) => {
      if (msg.type === 'bye') {
        clearTimeout(timer);
        resolve();
      }
    });
  });
}

function startPinger(mux: ClientMux, reporter: Reporter): NodeJS.Timeout {
  let id = 0;
  mux.on('message', (msg) => {
    if (msg.type === 'pong') reporter.emit({ type: 'rtt', ms: Date.now() - msg.sentAt });
    else if (msg.type === 'ping') mux.send({ type: 'pong', id: msg.id, sentAt: msg.sentAt });
  });
  const timer = setInterval(() => mux.send({ type: 'ping', id: ++id, sentAt: Date.now() }), PING_INTERVAL_MS);
  timer.unref();
  mux.once('close', () => clearInterval(timer));
  return timer;
}

/** Which pod the tunnel goes to: the target pod (the agent listens in its netns), or a targetless agent's own pod. */
export function tunnelPod(
  agent: AgentEndpoint,
  target: ResolvedTarget | undefined,
): { namespace: string; pod: string } {
  return target
    ? { namespace: target.namespace, pod: target.podName }
    : { namespace: agent.agentNamespace, pod: agent.agentPod };
}

/** How long the native connection may take to join; without it, the session goes on through the agent alone. */
const NATIVE_JOIN_MS = 5000;

/**
 * Joins the native connection (native-splice) to the session that just said hello. Its incoming streams are the
 * session's like those of the tunnel itself, so they are handed on as the tunnel's (the session knows one stream
 * source), and it closes with the tunnel. If it cannot join, it is closed: the agent then keeps every steal itself
 * (and every outgoing connection).
 */
async function joinNative(mux: ClientMux, conn: Duplex, hello: HelloOk): Promise<ClientMux | undefined> {
  const native = createClientMux(conn);
  const joined = await new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => resolve(false), NATIVE_JOIN_MS);
    native.on('message', (msg) => {
      clearTimeout(timer);
      resolve(msg.type === 'nativeJoined');
    });
    native.once('close', () => {
      clearTimeout(timer);
      resolve(false);
    });
    native.send({ type: 'nativeJoin', token: hello.sessionId });
  });
  if (!joined || mux.closed) {
    native.close('the native connection did not join');
    conn.destroy();
    return undefined;
  }
  native.on('stream', (stream) => mux.emit('stream', stream));
  mux.once('close', () => {
    native.close('tunnel closed');
    conn.destroy();
  });
  return native;
}

/**
 * Opens the tunnel and says hello, retrying while the agent is still starting to listen (the port-forward's dial is
 * refused, or the connection closes before the handshake) until the deadline.
 */
export async function connectAgent(
  kc: KubeConfig,
  agent: AgentEndpoint,
  target: ResolvedTarget | undefined,
  input: {
    deadline: number;
    identity: ReturnType<typeof clientIdentity>;
    features?: string[];
    resumeSessionId?: string;
  },
): Promise<{ mux: ClientMux; hello: HelloOk; conn: Duplex; native?: ClientMux }> {
  const where = tunnelPod(agent, target);
  const features = input.features ?? Object.values(FEATURES);
  // The native data path's port rides in the same port-forward, when the agent runs it and the caller wants it.
  const nativePort = features.includes(FEATURES.nativeSplice) ? agent.nativePort : undefined;
  let lastError: unknown;
  const started = Date.now();
  const retryDelay = (): Promise<void> =>
    delay(Date.now() - started < CONNECT_RETRY_MS.earlyFor ? CONNECT_RETRY_MS.early : CONNECT_RETRY_MS.later);
  while (Date.now() < input.deadline) {
    let conn: Duplex;
    let nativeConn: Duplex | undefined;
    try {
      [conn, nativeConn] = await openPortForwards(kc, {
        namespace: where.namespace,
        pod: where.pod,
        ports: nativePort ? [agent.port, nativePort] : [agent.port],
      });
    } catch (err) {
      // Refused (RBAC, no such pod) is final; the API server failing (5xx) may pass while the deadline allows.
      if (isUserError(err) && (apiErrorCode(err.cause) ?? 0) < 500) throw err;
      lastError = err;
      await retryDelay();
      continue;
    }
    let tunnelError: Error | undefined;
    conn.on('error', (err) => {
      tunnelError = err;
    });
    // The native port may not be served (the agent could not start it): its stream fails alone, and is left out.
    nativeConn?.on('error', () => undefined);
    const mux = createClientMux(conn);
    try {
      const hello = await clientHello(mux, {
        token: agent.token,
        client: input.identity,
        features: nativeConn ? features : features.filter((f) => f !== FEATURES.nativeSplice),
        ...(input.resumeSessionId ? { resumeSessionId: input.resumeSessionId } : {}),
        timeoutMs: Math.max(1000, input.deadline - Date.now()),
      });
      let native: ClientMux | undefined;
      if (nativeConn && hello.features.includes(FEATURES.nativeSplice))
        native = await joinNative(mux, nativeConn, hello);
      else nativeConn?.destroy();
      return { mux, hello, conn, ...(native ? { native } : {}) };
    } catch (err) {
      mux.close('handshake failed');
      conn.destroy();
      nativeConn?.destroy();
      const retryable =
        tunnelError instanceof PortForwardError ||
        (isUserError(err) && /closed during the handshake/.test(err.message));
      if (!retryable) throw err;
      lastError = tunnelError ?? err;
      await retryDelay();
    }
  }
  throw new UserError(
    `the agent ${agent.name} did not accept the tunnel to ${where.pod}:${agent.port} in time ` +
      `(${errorMessage(lastError)})`,
    `check the agent's logs (kubectl logs -n ${agent.agentNamespace} ` +
      `${agent.agentPod}${agent.mode === 'ephemeral' ? ` -c ${agent.agentContainer}` : ''}) or raise --startup-timeout`,
  );
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
