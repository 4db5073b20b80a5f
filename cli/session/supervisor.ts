// The session supervisor: keeps a session alive while the cluster moves under it — reconnects a lost or stalled tunnel
// (resuming the agent's session), follows the target to its new pod, replaces a dead agent, joins every replica with
// --all-pods — and holds the cluster-wide steal locks. The local command never notices; the user sees events.
import { CoreV1Api, type V1Pod } from '@kubernetes/client-node';
import { errorMessage, isUserError, UserError } from '../../shared/errors.js';
import type { AgentMessage, ClientMessage } from '../../shared/protocol.js';
import { formatTarget } from '../../shared/target.js';
import { createEphemeralAgent, createJobAgent, type AgentEndpoint, type AgentOptions } from '../kube/agent.js';
import { findAgent } from '../kube/agent-reuse.js';
import { apiErrorCode } from '../kube/errors.js';
import { informPods, type PodInformer } from '../kube/pod-informer.js';
import { StealLeases, workloadOfPod } from '../kube/steal-lease.js';
import { isPodReady, KIND_RESOLVERS, resolveTarget, selectorToString, type ResolvedTarget } from '../kube/target.js';
import { kindClients } from '../kube/targets/resolver.js';
import { debug, info, type Reporter, warn } from '../reporter.js';
import {
  agentOptionsFor,
  clientIdentity,
  connectAgent,
  connectSession,
  type Retarget,
  type Session,
  type SessionOptions,
} from './connect.js';
import { SessionMux, type MemberLink } from './supervised-mux.js';
import { byeAndWait, watchLiveness } from './tunnel-health.js';

export interface SupervisorOptions extends SessionOptions {
  /** A deploy/sts target gets an agent on every Ready pod. */
  allPods?: boolean;
  /** Cluster-wide steal locks (Leases) for unfiltered steals; default true. */
  stealLocks?: boolean;
}

/** Reconnect pacing: quick first tries (a port-forward blip), then at most every 2 s; give up after 2 minutes. */
export const RECONNECT_FIRST_DELAY_MS = 100;
export const RECONNECT_MAX_DELAY_MS = 2000;
export const RECONNECT_GIVE_UP_MS = 120_000;
/** How long a reconnect keeps asking the same agent to resume the session before it accepts a fresh one. */
const RESUME_RETRY_MS = 5000;
/**
 * How long one reconnect attempt keeps retrying refused dials. Short, so a dead agent is noticed soon (its pod status
 * is checked between attempts); a slow API server is not cut short: each attempt completes its port-forward and
 * handshake.
 */
const ATTEMPT_MS = 1000;

/** Exponential backoff: 100, 200, 400, … ms, capped at 2 s. Pure. */
export function backoffDelay(attempt: number): number {
  return Math.min(RECONNECT_MAX_DELAY_MS, RECONNECT_FIRST_DELAY_MS * 2 ** Math.min(attempt, 16));
}

/** What the supervisor does with a member whose pod the watch reports. Pure. */
export function podFate(pod: V1Pod | undefined, uid: string): 'alive' | 'gone' {
  if (!pod || pod.metadata?.uid !== uid || pod.metadata?.deletionTimestamp) return 'gone';
  const phase = pod.status?.phase;
  return phase === 'Failed' || phase === 'Succeeded' ? 'gone' : 'alive';
}

interface Member {
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

export async function connectSupervisedSession(options: SupervisorOptions, reporter: Reporter): Promise<Session> {
  const first = await connectSession(options, reporter);
  if (!first.target) return first;
  const supervisor = new Supervisor(first, first.target, options, reporter);
  await supervisor.start();
  return supervisor.session();
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

class Supervisor {
  private readonly members = new Set<Member>();
  private readonly joining = new Set<string>();
  private readonly mux: SessionMux;
  private readonly identity = clientIdentity();
  private readonly agentOptions: AgentOptions;
  private readonly leases: StealLeases | undefined;
  private podInformer: PodInformer | undefined;
  private over = false;
  private following = false;
  private readonly retargeted: Array<(change: Retarget) => void> = [];
  private readonly stopped: Array<(reason: string) => void> = [];
  private closing: Promise<void> | undefined;

  constructor(
    private readonly first: Session,
    private readonly firstTarget: ResolvedTarget,
    private readonly options: SupervisorOptions,
    private readonly reporter: Reporter,
  ) {
    this.agentOptions = agentOptionsFor(options, options.agentNamespace ?? first.namespace, this.identity);
    if (options.stealLocks !== false) {
      const workload = workloadOfPod(firstTarget.pod);
      this.leases = new StealLeases({
        kc: first.kc,
        namespace: firstTarget.namespace,
        workload,
        user: this.identity.user,
        host: this.identity.host,
        onLost: (port, holder) =>
          this.reporter.emit({
            type: 'error',
            message:
              `lost the steal lock of port ${port} to ${holder.user}@${holder.host} (devop could not renew it ` +
              `in time)`,
            hint: 'run devop again once the other session ends',
          }),
        onStopped: (port) => this.stopFromOutside(port),
        onRenewError: (port, err) =>
          warn(this.reporter, `could not renew the steal lock of port ${port}: ${errorMessage(err)}`),
        log: (text) => debug(this.reporter, text),
      });
    }
    this.mux = new SessionMux(
      reporter,
      (msg) => this.gate(msg),
      (port) => void this.leases?.release(port),
    );
  }

  async start(): Promise<void> {
    const member: Member = {
      target: this.firstTarget,
      agent: this.first.agent,
      link: { pod: this.firstTarget.podName, mux: this.first.tunnel, native: this.first.native },
      sessionId: this.first.hello.sessionId,
      agentVersion: this.first.hello.agentVersion,
      sent: new Map(),
      state: 'up',
      original: true,
    };
    this.adopt(member, true);
    const allPods = this.allPods();
    if (this.options.allPods && !allPods)
      warn(this.reporter, '--all-pods needs a deploy/, sts/ or rollout/ target: only this pod is used');
    const query = await this.podQuery(allPods);
    if (allPods) {
      // Join the replicas that are Ready now before the session is handed over, so "ready" means every pod.
      const core = this.first.kc.makeApiClient(CoreV1Api);
      const pods = (await core.listNamespacedPod({ namespace: query.namespace, labelSelector: query.labelSelector }))
        .items;
      await Promise.all(
        pods
          .filter((p) => isPodReady(p) && p.metadata?.name !== this.firstTarget.podName)
          .map((p) => this.join(p.metadata?.name ?? '')),
      );
    }
    this.watchPods(query, allPods);
  }

  session(): Session {
    return {
      kc: this.first.kc,
      namespace: this.first.namespace,
      target: this.firstTarget,
      agent: this.first.agent,
      tunnel: this.mux,
      hello: this.first.hello,
      close: (reason?: string) => (this.closing ??= this.close(reason ?? 'session ended')),
      onRetarget: (listener) => this.retargeted.push(listener),
      onStopped: (listener) => this.stopped.push(listener),
      podNames: () => [...this.members].filter((m) => m.state === 'up').map((m) => m.target.podName),
    };
  }

  /** Every Ready pod gets an agent: asked with --all-pods, and always for an extension the API server calls (it picks
   * any pod behind the Service, so one stolen pod would answer only some of its requests). */
  /**
   * Whether every Ready pod of the target is taken over: with --all-pods, and always for what the API server calls (an
   * APIService's or a webhook's pods), since it calls any pod behind the Service.
   */
  private allPods(): boolean {
    const { ref, extension, webhooks } = this.firstTarget;
    return (Boolean(this.options.allPods) && ref.kind !== 'pod') || extension !== undefined || webhooks !== undefined;
  }

  /** Unfiltered steals take the workload's cluster-wide lock first. */
  private async gate(
    msg: Extract<ClientMessage, { type: 'subscribe' }>,
  ): Promise<Extract<AgentMessage, { type: 'refused' }> | undefined> {
    const filtered = msg.filter && (msg.filter.header || msg.filter.path || msg.filter.method);
    if (!this.leases || msg.mode !== 'steal' || filtered) {
      if (this.leases?.heldPorts().includes(msg.port)) await this.leases.release(msg.port);
      return undefined;
    }
    try {
      const result = await this.leases.take(msg.port);
      if (result.ok) return undefined;
      return { type: 'refused', id: msg.id, port: msg.port, reason: result.reason, holder: result.holder };
    } catch (err) {
      // No right to use Leases (or no Lease API): steal without the cluster-wide lock, and say so.
      warn(
        this.reporter,
        `no cluster-wide steal lock for port ${msg.port} (${errorMessage(err)}); ` +
          "only this agent's own lock applies",
      );
      return undefined;
    }
  }

  /** A steal lock of this session was deleted under it (`devop sessions stop`): the session ends, as on Ctrl-C. */
  private stopFromOutside(port: number): void {
    if (this.over) return;
    const lease = this.leases?.nameFor(port) ?? '';
    const reason = `the steal lock of port ${port} (Lease ${lease}) was deleted (devop sessions stop)`;
    for (const listener of this.stopped) listener(reason);
  }

  private adopt(member: Member, primary: boolean): void {
    this.members.add(member);
    this.mux.attach(member.link, { primary, previouslySent: member.sent });
    member.sent = this.mux.sentSubscriptions();
    member.stopLiveness = watchLiveness(member.link.mux, {
      onRtt: (ms) => {
        if (!member.original && member.link === this.primaryLink()) this.reporter.emit({ type: 'rtt', ms });
      },
      onStall: (silent) =>
        warn(this.reporter, `tunnel to pod ${member.link.pod} stalled (no answer for ${Math.round(silent / 1000)} s)`),
    });
    member.link.mux.once('close', (err) => this.onLost(member, err));
  }

  private primaryLink(): MemberLink | undefined {
    return [...this.members].find((m) => m.state === 'up')?.link;
  }

  private onLost(member: Member, err: Error | undefined): void {
    member.stopLiveness?.();
    this.mux.detach(member.link);
    if (this.over || member.state !== 'up') return;
    member.state = 'reconnecting';
    warn(
      this.reporter,
      `tunnel to pod ${member.link.pod} lost${err ? ` (${err.message})` : ''}: reconnecting… (the pod ` +
        `serves its own traffic meanwhile)`,
    );
    void this.reconnect(member).catch((e: unknown) => this.giveUp(member, e));
  }

  private async reconnect(member: Member): Promise<void> {
    const started = Date.now();
    const core = this.first.kc.makeApiClient(CoreV1Api);
    let attempt = 0;
    let failures = 0;
    while (!this.over && member.state === 'reconnecting') {
      if (Date.now() - started > RECONNECT_GIVE_UP_MS)
        throw new UserError(
          `could not reconnect to pod ${member.link.pod} for ${RECONNECT_GIVE_UP_MS / 1000} s`,
          'check the cluster (devop doctor) and run devop again',
        );
      let pod: V1Pod | undefined;
      let known = true;
      try {
        pod = await core.readNamespacedPod({ name: member.target.podName, namespace: member.target.namespace });
      } catch (err) {
        known = apiErrorCode(err) === 404; // 404: gone; anything else (API down): cannot tell yet
      }
      if (known && podFate(pod, member.target.podUid) === 'gone') {
        await this.podGone(member);
        return;
      }
      if (pod) member.target = { ...member.target, pod };
      try {
        if (failures >= 3 || (await this.agentState(member)) === 'dead') {
          // The agent may be dead (killed, its pod deleted): reuse another live one, or start a new one.
          const found = await findAgent(this.first.kc, member.target, this.agentOptions).catch(() => undefined);
          if (!found || found.name !== member.agent.name) {
            member.agent = found ?? (await this.startAgent(member.target));
            info(
              this.reporter,
              `pod ${member.link.pod}: ` +
                `${found ? `using agent ${found.name}` : `started a new agent ${member.agent.name}`}`,
            );
            failures = 0;
          }
        }
        const agentName = member.agent.name;
        const link = await connectAgent(this.first.kc, member.agent, member.target, {
          deadline: Date.now() + ATTEMPT_MS,
          identity: this.identity,
          features: this.options.features,
          resumeSessionId: member.sessionId,
        });
        if (this.over) {
          link.mux.close('session over');
          return;
        }
        const resumed = link.hello.sessionId === member.sessionId;
        if (!resumed && agentName === member.agent.name && Date.now() - started < RESUME_RETRY_MS) {
          // The same agent may not have noticed the old connection drop yet (it refuses to resume a live one), and the
          // old session would keep the port: give it up on this fresh session and ask again shortly.
          await byeAndWait(link.mux, 'resume not granted yet', 200);
          throw new Error('the agent did not resume the session yet');
        }
        member.sessionId = link.hello.sessionId;
        member.link = { pod: member.link.pod, mux: link.mux, native: link.native };
        member.state = 'up';
        member.original = false;
        if (!resumed) member.sent = new Map();
        this.adopt(member, false);
        const subs = member.sent.size;
        info(
          this.reporter,
          `reconnected to pod ${member.link.pod} after ${((Date.now() - started) / 1000).toFixed(1)} s ` +
            `(${resumed ? 'session resumed' : `new session, ${subs} subscription${subs === 1 ? '' : 's'} restored`})`,
        );
        return;
      } catch (err) {
        failures++;
        if (isUserError(err) && /protocol version/.test(err.message)) throw err;
        debug(this.reporter, `reconnect to pod ${member.link.pod} failed: ${errorMessage(err)}`);
      }
      await delay(backoffDelay(attempt++));
    }
  }

  /** Whether the member's agent can still answer: its Job pod (or ephemeral container) runs. */
  private async agentState(member: Member): Promise<'running' | 'dead' | 'unknown'> {
    const { agent } = member;
    if (agent.mode === 'ephemeral') {
      const status = member.target.pod.status?.ephemeralContainerStatuses?.find((c) => c.name === agent.agentContainer);
      return status?.state?.terminated ? 'dead' : status?.state?.running ? 'running' : 'unknown';
    }
    try {
      const pod = await this.first.kc
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

  private startAgent(target: ResolvedTarget): Promise<AgentEndpoint> {
    return this.agentOptions.ephemeral
      ? createEphemeralAgent(this.first.kc, target, this.agentOptions)
      : createJobAgent(this.first.kc, target, this.agentOptions);
  }

  /**
   * The member's pod went away: with --all-pods it is dropped (the watch joins new pods); else devop follows the
   * target.
   */
  private async podGone(member: Member): Promise<void> {
    member.state = 'gone';
    this.members.delete(member);
    if (this.allPods()) {
      info(
        this.reporter,
        `pod ${member.link.pod} is gone: dropped (${this.mux.size} pod${this.mux.size === 1 ? '' : 's'} left)`,
      );
      return;
    }
    await this.follow(member);
  }

  private async follow(previous: Member): Promise<void> {
    if (this.following) return;
    this.following = true;
    const target = formatTarget(this.firstTarget.ref);
    warn(this.reporter, `target pod ${previous.link.pod} is gone: following ${target}…`);
    const started = Date.now();
    try {
      for (let attempt = 0; !this.over; attempt++) {
        if (Date.now() - started > RECONNECT_GIVE_UP_MS)
          throw new UserError(
            `${target} has had no Ready pod for ${RECONNECT_GIVE_UP_MS / 1000} s`,
            'check the workload (kubectl get pods) and run devop again',
          );
        try {
          const member = await this.attachPod(target);
          if (!member) return;
          info(
            this.reporter,
            `following ${target}: now pod ${member.link.pod} (agent ` +
              `${member.agent.name}${member.agent.reused ? ', reused' : ''})`,
          );
          for (const listener of this.retargeted)
            listener({ target: member.target, agent: member.agent, agentVersion: member.agentVersion });
          this.watchPods(
            { namespace: member.target.namespace, fieldSelector: `metadata.name=${member.target.podName}` },
            false,
          );
          return;
        } catch (err) {
          debug(this.reporter, `following ${target}: ${errorMessage(err)}`);
        }
        await delay(backoffDelay(attempt));
      }
    } finally {
      this.following = false;
    }
  }

  /** Resolves `target` (one pod), gets its agent and attaches a new member. */
  private async attachPod(target: string): Promise<Member | undefined> {
    const resolved = await resolveTarget(this.first.kc, {
      target,
      namespace: this.firstTarget.namespace,
      allowHostNetwork: this.options.allowHostNetwork,
    });
    const existing = await findAgent(this.first.kc, resolved, this.agentOptions);
    let agent = existing ?? (await this.startAgent(resolved));
    let link: Awaited<ReturnType<typeof connectAgent>>;
    try {
      link = await connectAgent(this.first.kc, agent, resolved, {
        deadline: Date.now() + (existing ? ATTEMPT_MS : this.agentOptions.startupTimeoutMs),
        identity: this.identity,
        features: this.options.features,
      });
    } catch (err) {
      if (!existing) throw err;
      agent = await this.startAgent(resolved); // the reused agent was on its way out
      link = await connectAgent(this.first.kc, agent, resolved, {
        deadline: Date.now() + this.agentOptions.startupTimeoutMs,
        identity: this.identity,
        features: this.options.features,
      });
    }
    if (this.over) {
      link.mux.close('session over');
      return undefined;
    }
    const member: Member = {
      target: resolved,
      agent,
      link: { pod: resolved.podName, mux: link.mux, native: link.native },
      sessionId: link.hello.sessionId,
      sent: new Map(),
      state: 'up',
      original: false,
      agentVersion: link.hello.agentVersion,
    };
    this.adopt(member, this.mux.size === 0);
    return member;
  }

  /** The pods the watch looks at: the workload's (all-pods, or follow a deploy/sts) or the one pod by name. */
  private async podQuery(
    allPods: boolean,
  ): Promise<{ namespace: string; labelSelector?: string; fieldSelector?: string }> {
    const { ref, namespace } = this.firstTarget;
    const byName = { namespace, fieldSelector: `metadata.name=${this.firstTarget.podName}` };
    if (!allPods) return byName;
    const workload = await KIND_RESOLVERS[ref.kind].read(kindClients(this.first.kc), ref.name, namespace, ref);
    const labelSelector = workload.kind === 'selector' ? selectorToString(workload.selector) : '';
    return labelSelector ? { namespace, labelSelector } : byName;
  }

  /**
   * Watches the pods: a member whose pod is deleted or replaced is cut (its tunnel would otherwise outlive the pod),
   * and with --all-pods every Ready pod that is not a member yet is joined.
   */
  private watchPods(
    query: { namespace: string; labelSelector?: string; fieldSelector?: string },
    allPods: boolean,
  ): void {
    const onPods = (pods: V1Pod[]): void => {
      if (this.over) return;
      const byName = new Map(pods.map((p) => [p.metadata?.name ?? '', p]));
      for (const m of this.members) {
        if (m.state !== 'up') continue;
        const pod = byName.get(m.target.podName);
        if (podFate(pod, m.target.podUid) === 'gone') {
          info(this.reporter, `pod ${m.link.pod} is ${pod ? 'terminating' : 'deleted'}`);
          m.link.mux.send({ type: 'bye', reason: 'the target pod is going away' });
          m.link.mux.close('target pod going away');
        }
      }
      if (!allPods) return;
      const memberPods = new Set([...this.members].filter((m) => m.state !== 'gone').map((m) => m.target.podName));
      for (const pod of pods) {
        const name = pod.metadata?.name ?? '';
        if (!isPodReady(pod) || memberPods.has(name) || this.joining.has(name)) continue;
        void this.join(name);
      }
    };
    this.podInformer?.stop();
    this.podInformer = informPods(this.first.kc, query, onPods, (err) => {
      if (!this.over)
        warn(
          this.reporter,
          `stopped watching the target's pods: ${errorMessage(err)} (devop still reconnects, but will not notice ` +
            `new pods)`,
        );
    });
  }

  private async join(podName: string): Promise<void> {
    this.joining.add(podName);
    const container = this.firstTarget.container.name;
    try {
      const member = await this.attachPod(`pod/${podName}/container/${container}`);
      if (member)
        info(this.reporter, `all pods: joined pod ${podName} (agent ${member.agent.name}; ${this.mux.size} pods)`);
    } catch (err) {
      warn(this.reporter, `all pods: could not join pod ${podName}: ${errorMessage(err)}`);
    } finally {
      this.joining.delete(podName);
    }
  }

  private giveUp(member: Member, err: unknown): void {
    member.state = 'gone';
    this.members.delete(member);
    warn(this.reporter, `gave up on pod ${member.link.pod}: ${errorMessage(err)}`);
    const alive = [...this.members].some((m) => m.state !== 'gone');
    if (!alive && !this.over && !this.following) {
      this.over = true;
      this.podInformer?.stop();
      void this.leases?.releaseAll();
      this.mux.end(err instanceof Error ? err : new Error(String(err)));
    }
  }

  private async close(reason: string): Promise<void> {
    this.over = true;
    this.podInformer?.stop();
    const live = [...this.members].filter((m) => m.state === 'up' && !m.link.mux.closed);
    for (const m of this.members) m.stopLiveness?.();
    await Promise.all(live.map((m) => byeAndWait(m.link.mux, reason)));
    this.mux.end();
    await this.leases?.releaseAll();
  }
}
