// SessionMux: one session seen through one stable SessionTunnel while the real tunnels underneath come and go
// (reconnects, a followed pod, every replica with --all-pods). It routes requests, merges answers, and replays the
// session's subscriptions on every (re)attached tunnel, so the exec service never sees a tunnel change.
import { EventEmitter } from 'node:events';
import { errorMessage } from '../../shared/errors.js';
import type { MuxStream } from '../../shared/mux.js';
import type { AgentMessage, ClientMessage, StreamOpen } from '../../shared/protocol.js';
import { type Reporter, warn } from '../reporter.js';
import { trafficToEvent } from './traffic.js';
import { nativeTakes, type SessionTunnel } from './tunnel.js';

type Subscribe = Extract<ClientMessage, { type: 'subscribe' }>;
type Answer = Extract<AgentMessage, { type: 'subscribed' | 'refused' | 'unsubscribed' | 'error' }>;

/** One attached tunnel: a pod's agent. */
export interface MemberLink {
  /** The target pod (events say which pod each connection came from). */
  pod: string;
  mux: SessionTunnel;
  /** Its agent's native data path, when it joined: outgoing connections to addresses go there (nativeTakes). */
  native?: Pick<SessionTunnel, 'closed' | 'openStream'>;
}

/** Decides before a subscribe goes out (the steal lock): undefined = go ahead, else the refusal to answer with. */
export type SubscribeGate = (msg: Subscribe) => Promise<Extract<AgentMessage, { type: 'refused' }> | undefined>;

interface Pending {
  id: string;
  /** The answers that belong to this request (an unsubscribe reuses its subscription's id). */
  accepts: readonly Answer['type'][];
  expect: Set<MemberLink>;
  answers: Answer[];
  port: number;
  /**
   * A subscribe waits for one agent's answer even when every tunnel is down (a reconnect): the next tunnel's answer to
   * its replay settles it, so no "subscribed" is made up before an agent holds the port. Cleared after REPLAY_WAIT_MS.
   */
  needsAnswer: boolean;
}

/** How long a merged request waits for the slowest pod before answering with what it has. */
const MERGE_TIMEOUT_MS = 15_000;
/**
 * How long a subscribe waits for a tunnel to come back before it is answered as recorded (replayed when one does):
 * beyond most reconnects, within the caller's own wait for the answer (AGENT_REQUEST_TIMEOUT_MS).
 */
const REPLAY_WAIT_MS = 10_000;

export interface SessionMux {
  on(event: 'message', listener: (msg: AgentMessage) => void): this;
  on(event: 'stream', listener: (stream: MuxStream, pod?: string) => void): this;
  on(event: 'close', listener: (err?: Error) => void): this;
  once(event: 'message', listener: (msg: AgentMessage) => void): this;
  once(event: 'stream', listener: (stream: MuxStream, pod?: string) => void): this;
  once(event: 'close', listener: (err?: Error) => void): this;
  off(event: 'message', listener: (msg: AgentMessage) => void): this;
  off(event: 'stream', listener: (stream: MuxStream, pod?: string) => void): this;
  off(event: 'close', listener: (err?: Error) => void): this;
}

export class SessionMux extends EventEmitter implements SessionTunnel {
  private readonly members = new Set<MemberLink>();
  /** The session's subscriptions by port (the last subscribe sent), replayed on every new tunnel. */
  private readonly subscriptions = new Map<number, Subscribe>();
  /** Pause state: all ports (undefined key) or single ports. */
  private readonly paused = new Map<number | 'all', boolean>();
  private readonly pending = new Map<string, Pending>();
  private over = false;
  /** The tunnel that env/DNS/outgoing/file requests use; it stays set (closed) while reconnecting. */
  private primary: MemberLink | undefined;

  constructor(
    private readonly reporter: Reporter,
    private readonly gate?: SubscribeGate,
    private readonly onUnsubscribe?: (port: number) => void,
  ) {
    super();
    this.setMaxListeners(0);
  }

  get closed(): boolean {
    return this.over;
  }

  get size(): number {
    return this.members.size;
  }

  pods(): string[] {
    return [...this.members].map((m) => m.pod);
  }

  /** Attaches a tunnel (after its hello): replays the subscriptions and pause state, forwards its traffic. */
  attach(link: MemberLink, options: { primary?: boolean; previouslySent?: ReadonlyMap<number, string> } = {}): void {
    if (this.over) {
      link.mux.close('session over');
      return;
    }
    this.members.add(link);
    if (options.primary || !this.primary || this.primary.mux.closed) this.primary = link;
    link.mux.on('message', (msg) => this.onMemberMessage(link, msg));
    link.mux.on('stream', (stream) => this.emit('stream', stream, link.pod));
    // A resumed session may still hold ports the session gave up while it was away.
    for (const [port, id] of options.previouslySent ?? []) {
      if (!this.subscriptions.has(port)) link.mux.send({ type: 'unsubscribe', id, port });
    }
    for (const sub of this.subscriptions.values()) link.mux.send(sub);
    // A subscribe that the tunnels before this one left unanswered waits for this one's answer to the replay.
    for (const p of this.pending.values()) if (this.awaitsReplay(p)) p.expect.add(link);
    for (const [key, paused] of this.paused) {
      if (paused) link.mux.send(key === 'all' ? { type: 'pause' } : { type: 'pause', port: key });
    }
  }

  /** The ports and ids this session has asked for (what a tunnel holds once attached). */
  sentSubscriptions(): Map<number, string> {
    return new Map([...this.subscriptions].map(([port, s]) => [port, s.id]));
  }

  /** Detaches a tunnel (lost or dropped); pending merged answers stop waiting for it. */
  detach(link: MemberLink): void {
    if (!this.members.delete(link)) return;
    if (this.primary === link) this.primary = [...this.members].find((m) => !m.mux.closed) ?? link;
    for (const p of [...this.pending.values()]) {
      p.expect.delete(link);
      this.settle(p);
    }
  }

  /** Ends the session for good: every tunnel closes, 'close' is emitted (with the reason when it was a failure). */
  end(err?: Error): void {
    if (this.over) return;
    this.over = true;
    for (const m of this.members) m.mux.close(err?.message ?? 'session ended');
    this.members.clear();
    this.emit('close', err);
  }

  send(msg: ClientMessage): boolean {
    if (this.over) return false;
    switch (msg.type) {
      case 'subscribe':
        void this.subscribe(msg);
        return true;
      case 'unsubscribe':
        this.subscriptions.delete(msg.port);
        this.onUnsubscribe?.(msg.port);
        this.broadcast(msg, msg.id, msg.port, ['unsubscribed', 'error']);
        return true;
      case 'pause':
      case 'resume':
        this.paused.set(msg.port ?? 'all', msg.type === 'pause');
        if (msg.port === undefined && msg.type === 'resume') this.paused.clear();
        for (const m of this.members) m.mux.send(msg);
        return true;
      case 'bye':
        for (const m of this.members) m.mux.send(msg);
        return true;
      default:
        // env, DNS, liveness: the primary tunnel answers for the session.
        return this.primary?.mux.send(msg) ?? false;
    }
  }

  openStream(open: StreamOpen): MuxStream {
    if (!this.primary) throw new Error('no tunnel is attached');
    const { mux, native } = this.primary;
    return native && nativeTakes(open, native) ? native.openStream(open) : mux.openStream(open);
  }

  /** A local close (as on a real mux): 'close' is emitted without an error. */
  close(_reason?: string): void {
    this.end();
  }

  private async subscribe(msg: Subscribe): Promise<void> {
    let refusal: Extract<AgentMessage, { type: 'refused' }> | undefined;
    try {
      refusal = await this.gate?.(msg);
    } catch (err) {
      this.emit('message', {
        type: 'error',
        id: msg.id,
        code: 'internal',
        message: errorMessage(err),
      });
      return;
    }
    if (this.over) return;
    if (refusal) {
      this.emit('message', refusal);
      return;
    }
    this.subscriptions.set(msg.port, msg);
    this.broadcast(msg, msg.id, msg.port, ['subscribed', 'refused', 'error']);
    // A new subscription starts active. While the session is paused (a mode or filter switch), it is paused right
    // behind it on each tunnel: the agent applies both in order, so no connection reaches the local command between.
    if (this.paused.get(msg.port) ?? this.paused.get('all')) {
      for (const m of this.members) if (!m.mux.closed) m.mux.send({ type: 'pause', port: msg.port });
    }
  }

  /** Sends a request to every tunnel and answers once with the merged result (a refusal or error wins). */
  private broadcast(msg: ClientMessage, id: string, port: number, accepts: Pending['accepts']): void {
    const live = [...this.members].filter((m) => !m.mux.closed);
    const needsAnswer = accepts.includes('subscribed');
    const pending: Pending = { id, port, accepts, expect: new Set(live), answers: [], needsAnswer };
    this.pending.set(id, pending);
    const timer = setTimeout(() => {
      pending.expect.clear();
      this.settle(pending);
    }, MERGE_TIMEOUT_MS);
    timer.unref();
    const replayWait = setTimeout(() => {
      pending.needsAnswer = false;
      this.settle(pending);
    }, REPLAY_WAIT_MS);
    replayWait.unref();
    for (const m of live) m.mux.send(msg);
    // No tunnel up (reconnecting): the request is recorded and replayed when one attaches; an unsubscribe is answered
    // now, a subscribe by that tunnel.
    this.settle(pending);
    if (!this.pending.has(id)) {
      clearTimeout(timer);
      clearTimeout(replayWait);
    }
  }

  /** A subscribe still in force that no agent answered and no tunnel up is asked: the next tunnel's replay will be. */
  private awaitsReplay(p: Pending): boolean {
    return (
      p.needsAnswer && p.answers.length === 0 && p.expect.size === 0 && this.subscriptions.get(p.port)?.id === p.id
    );
  }

  private settle(p: Pending): void {
    if (p.expect.size > 0 || !this.pending.has(p.id) || this.awaitsReplay(p)) return;
    this.pending.delete(p.id);
    const bad = p.answers.find((a) => a.type === 'refused' || a.type === 'error');
    const first = p.answers[0];
    if (bad) {
      // A refused or failed subscribe is not the session's: forget it (no replay) and give its lock back.
      const sub = this.subscriptions.get(p.port);
      if (sub && sub.id === p.id && p.accepts.includes('subscribed')) {
        this.subscriptions.delete(p.port);
        this.onUnsubscribe?.(p.port);
      }
      this.emit('message', bad);
    } else if (first) this.emit('message', first);
    else {
      const sub = this.subscriptions.get(p.port);
      this.emit(
        'message',
        sub && sub.id === p.id
          ? { type: 'subscribed', id: p.id, port: p.port, mode: sub.mode }
          : { type: 'unsubscribed', id: p.id, port: p.port },
      );
    }
  }

  private onMemberMessage(link: MemberLink, msg: AgentMessage): void {
    if (this.over) return;
    switch (msg.type) {
      case 'subscribed':
      case 'refused':
      case 'unsubscribed':
      case 'error': {
        const p = msg.id !== undefined ? this.pending.get(msg.id) : undefined;
        if (p?.expect.has(link) && p.accepts.includes(msg.type)) {
          p.expect.delete(link);
          p.answers.push(msg);
          this.settle(p);
          return;
        }
        if (msg.type === 'refused' || (msg.type === 'error' && msg.id !== undefined)) {
          // The answer to a replayed subscription: nobody waits for it, but the user must know.
          const why = msg.type === 'refused' ? msg.reason : msg.message;
          warn(
            this.reporter,
            `pod ${link.pod}: could not restore port ${msg.type === 'refused' ? msg.port : ''}: ${why}`,
          );
          return;
        }
        if (msg.type === 'error') this.emit('message', msg);
        return;
      }
      case 'traffic': {
        const event = trafficToEvent(msg.event, link.pod);
        if (event) this.reporter.emit(event);
        return;
      }
      case 'ping':
        link.mux.send({ type: 'pong', id: msg.id, sentAt: msg.sentAt });
        return;
      case 'pong':
        return;
      case 'bye':
        // The agent ends this pod's session; the supervisor sees the tunnel close and decides.
        return;
      default:
        if (link === this.primary || msg.type === 'log') this.emit('message', msg);
    }
  }
}
