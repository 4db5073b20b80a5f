// The session supervisor: keeps a session alive while the cluster moves under it — reconnects a lost or stalled tunnel
// (resuming the agent's session), follows the target to its new pod, replaces a dead agent, joins every replica with
// --all-pods — and holds the cluster-wide steal locks. The local command never notices; the user sees events.
// It composes its parts: the members (member.ts), their reconnects (reconnect.ts), the pod watch (pod-watch.ts), the
// steal locks (steal-gate.ts) and the merged tunnel the session sees (supervised-mux.ts).
import { CoreV1Api } from '@kubernetes/client-node';
import { errorMessage, UserError } from '../../shared/errors.js';
import { formatTarget } from '../../shared/target.js';
import { informPods, type PodInformer } from '../kube/pod-informer.js';
import { isPodReady, type ResolvedTarget } from '../kube/target.js';
import { debug, info, type Reporter, warn } from '../reporter.js';
import {
  agentOptionsFor,
  clientIdentity,
  connectSession,
  type Retarget,
  type Session,
  type SessionOptions,
} from './connect.js';
import { attachPod, type Member, type MemberContext } from './member.js';
import { podByName, podChanges, podQuery, type PodQuery, takesAllPods } from './pod-watch.js';
import { backoffDelay, delay, RECONNECT_GIVE_UP_MS, reconnectMember } from './reconnect.js';
import { StealGate } from './steal-gate.js';
import { SessionMux, type MemberLink } from './supervised-mux.js';
import { byeAndWait, watchLiveness } from './tunnel-health.js';

export { podFate } from './member.js';
export { backoffDelay, RECONNECT_FIRST_DELAY_MS, RECONNECT_GIVE_UP_MS, RECONNECT_MAX_DELAY_MS } from './reconnect.js';

export interface SupervisorOptions extends SessionOptions {
  /** A deploy/sts target gets an agent on every Ready pod. */
  allPods?: boolean;
  /** Cluster-wide steal locks (Leases) for unfiltered steals; default true. */
  stealLocks?: boolean;
}

export async function connectSupervisedSession(options: SupervisorOptions, reporter: Reporter): Promise<Session> {
  const first = await connectSession(options, reporter);
  if (!first.target) return first;
  const supervisor = new Supervisor(first, first.target, options, reporter);
  await supervisor.start();
  return supervisor.session();
}

class Supervisor {
  private readonly members = new Set<Member>();
  private readonly joining = new Set<string>();
  private readonly mux: SessionMux;
  private readonly ctx: MemberContext;
  private readonly locks: StealGate | undefined;
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
    const identity = clientIdentity();
    this.ctx = {
      kc: first.kc,
      agentOptions: agentOptionsFor(options, options.agentNamespace ?? first.namespace, identity),
      identity,
      features: options.features,
      namespace: firstTarget.namespace,
      allowHostNetwork: options.allowHostNetwork,
      isOver: () => this.over,
    };
    if (options.stealLocks !== false)
      // A steal lock deleted under the session (`devop sessions stop`): the session ends, as on Ctrl-C.
      this.locks = new StealGate(first.kc, firstTarget, identity, reporter, (reason) => {
        if (this.over) return;
        for (const listener of this.stopped) listener(reason);
      });
    this.mux = new SessionMux(
      reporter,
      async (msg) => this.locks?.gate(msg),
      (port) => void this.locks?.release(port),
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
    const query = await podQuery(this.first.kc, this.firstTarget, allPods);
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
      lockAhead: (ports) => this.locks?.lockAhead(ports),
    };
  }

  private allPods(): boolean {
    return takesAllPods(this.firstTarget, this.options.allPods);
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
    const end = await reconnectMember(this.ctx, member, this.reporter);
    if (end.kind === 'gone') return this.podGone(member);
    if (end.kind !== 'up') return;
    this.adopt(member, false);
    const subs = member.sent.size;
    info(
      this.reporter,
      `reconnected to pod ${member.link.pod} after ${((Date.now() - end.startedAt) / 1000).toFixed(1)} s ` +
        `(${end.resumed ? 'session resumed' : `new session, ${subs} subscription${subs === 1 ? '' : 's'} restored`})`,
    );
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
          const member = await this.attach(target);
          if (!member) return;
          info(
            this.reporter,
            `following ${target}: now pod ${member.link.pod} (agent ` +
              `${member.agent.name}${member.agent.reused ? ', reused' : ''})`,
          );
          for (const listener of this.retargeted)
            listener({ target: member.target, agent: member.agent, agentVersion: member.agentVersion });
          this.watchPods(podByName(member.target), false);
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

  /** Resolves `target` (one pod), gets its agent and adopts the new member. */
  private async attach(target: string): Promise<Member | undefined> {
    const member = await attachPod(this.ctx, target);
    if (member) this.adopt(member, this.mux.size === 0);
    return member;
  }

  /** Watches the pods: members whose pod is going away are cut (their tunnel would outlive it); new pods are joined. */
  private watchPods(query: PodQuery, allPods: boolean): void {
    this.podInformer?.stop();
    this.podInformer = informPods(
      this.first.kc,
      query,
      (pods) => {
        if (this.over) return;
        const { cut, join } = podChanges(pods, this.members, this.joining, allPods);
        for (const { member, deleted } of cut) {
          info(this.reporter, `pod ${member.link.pod} is ${deleted ? 'deleted' : 'terminating'}`);
          member.link.mux.send({ type: 'bye', reason: 'the target pod is going away' });
          member.link.mux.close('target pod going away');
        }
        for (const name of join) void this.join(name);
      },
      (err) => {
        if (!this.over)
          warn(
            this.reporter,
            `stopped watching the target's pods: ${errorMessage(err)} (devop still reconnects, but will not notice ` +
              `new pods)`,
          );
      },
    );
  }

  private async join(podName: string): Promise<void> {
    this.joining.add(podName);
    const container = this.firstTarget.container.name;
    try {
      const member = await this.attach(`pod/${podName}/container/${container}`);
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
      void this.locks?.releaseAll();
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
    await this.locks?.releaseAll();
  }
}
