// One devop session (one CLI) on this agent: its subscriptions, requests and streams; it outlives a dropped tunnel for
// a grace period so that a reconnecting CLI (hello.resumeSessionId) takes its steals back.
import { randomBytes } from 'node:crypto';
import { FEATURES, type ClientIdentity, type ClientMessage, type TrafficEvent } from '../shared/protocol.js';
import { ProtocolError, type AgentMux, type MuxStream } from '../shared/mux.js';
import { DnsError, resolveInPod } from './outgoing/dns.js';
import type { AgentLog } from './log.js';
import type { IncomingOpen, IncomingStream, IncomingTarget } from './incoming/subscription.js';
import type { PortTable } from './incoming/ports.js';
import { serveOutgoing } from './outgoing/connect.js';
import { serveUdp } from './outgoing/udp.js';
import { serveFile } from './files/serve-file.js';
import { deniedByCapabilities } from './capabilities.js';
import { readTargetEnv } from './env/target-env.js';
import type { NativeSplice } from './native/native-splice.js';

/**
 * The agent looks at each session's tunnel this often, and pings it when it has read nothing for as long (the CLI
 * answers; a tunnel busy with data is not pinged).
 */
const CHECK_INTERVAL_MS = 250;
/**
 * A tunnel that carried nothing for this long leaves its session unsure (a port-forward can hang without closing):
 * the new connections of its ports go to the pod until the tunnel speaks again, so a stall gives the pod its traffic
 * back within the failure rule's 2 s, and a short one costs the session nothing. Connections already taken stay.
 */
export const TUNNEL_UNSURE_MS = 1000;
/**
 * A tunnel that carried nothing for this long is taken for stalled: the session is treated as disconnected (closed,
 * then resumed or ended as any disconnected session).
 */
export const TUNNEL_STALL_MS = 10_000;
/** Reasons carry user input (a filter's regex): keep them within the protocol's limit. */
const MAX_REASON = 2000;

export interface SessionContext {
  ports: PortTable;
  pid: number | undefined;
  log: AgentLog;
  graceMs: number;
  /** The native data path, while it runs. */
  native(): NativeSplice | undefined;
  /** Called once when the session ends for good. */
  ended(session: Session): void;
}

export class Session implements IncomingTarget {
  readonly sessionId = randomBytes(9).toString('base64url');
  private mux: AgentMux | undefined;
  private wantsTraffic = true;
  reportsStreams = false;
  private nativeJoined = false;
  private graceTimer: NodeJS.Timeout | undefined;
  private over = false;
  /** The tunnel has been silent for TUNNEL_UNSURE_MS (see takesTraffic). */
  private unsure = false;

  constructor(
    readonly client: ClientIdentity,
    private readonly ctx: SessionContext,
  ) {}

  get connected(): boolean {
    return this.mux !== undefined && !this.mux.closed;
  }

  /** Connected, and its tunnel not silent (TUNNEL_UNSURE_MS): only then do new connections come to the session. */
  get takesTraffic(): boolean {
    return this.connected && !this.unsure;
  }

  get ended(): boolean {
    return this.over;
  }

  get native(): boolean {
    return this.nativeJoined && this.takesTraffic;
  }

  /** devop-splice says the session's native connection joined, or ended. */
  nativeChanged(joined: boolean): void {
    this.nativeJoined = joined;
  }

  get who(): string {
    return `${this.client.user}@${this.client.host}`;
  }

  /** Binds the session to a (new) connection; `features` are the client's from its hello. */
  attach(mux: AgentMux, features: string[] | undefined): void {
    if (this.graceTimer) clearTimeout(this.graceTimer);
    this.graceTimer = undefined;
    this.mux = mux;
    this.wantsTraffic = features === undefined || features.includes(FEATURES.traffic);
    this.reportsStreams = this.wantsTraffic && (features?.includes(FEATURES.streamEvents) ?? false);
    // The native connection comes over the same port-forward, right behind the hello: it may join from now on.
    if (features?.includes(FEATURES.nativeSplice)) this.nativeCall((n) => n.session(this.sessionId));
    // Liveness is enforced only once the client has spoken after its hello: a client that never does is not timed out.
    const heard = { at: Date.now(), any: false };
    let pingId = 0;
    const liveness = setInterval(() => {
      const silentMs = Date.now() - Math.max(heard.at, mux.lastReadAt);
      if (heard.any && silentMs > TUNNEL_STALL_MS) {
        this.ctx.log.error('tunnel stalled', { session: this.sessionId, user: this.who, silentMs });
        mux.close(`tunnel stalled: nothing heard for ${TUNNEL_STALL_MS / 1000} s`);
        return;
      }
      this.setUnsure(heard.any && silentMs > TUNNEL_UNSURE_MS, silentMs);
      if (silentMs >= CHECK_INTERVAL_MS) mux.send({ type: 'ping', id: ++pingId, sentAt: Date.now() });
    }, CHECK_INTERVAL_MS);
    liveness.unref();
    mux.on('message', (msg) => {
      heard.at = Date.now();
      heard.any = true;
      this.setUnsure(false, 0);
      this.onMessage(mux, msg);
    });
    mux.on('stream', (stream) => this.onStream(stream));
    mux.once('close', (err) => {
      clearInterval(liveness);
      this.onClose(mux, err);
    });
  }

  openIncoming(open: IncomingOpen): IncomingStream {
    if (!this.mux || this.mux.closed) throw new Error('session tunnel is down');
    return this.mux.openStream(open);
  }

  together<T>(fn: () => T): T {
    return this.mux && !this.mux.closed ? this.mux.together(fn) : fn();
  }

  traffic(event: TrafficEvent): void {
    if (this.wantsTraffic && this.mux && !this.mux.closed) this.mux.send({ type: 'traffic', event });
  }

  warn(message: string): void {
    this.mux?.send({ type: 'log', level: 'warn', message });
  }

  /** Ends the session for good: its subscriptions, rules and listeners go. */
  async end(reason: string): Promise<void> {
    if (this.over) return;
    this.over = true;
    if (this.graceTimer) clearTimeout(this.graceTimer);
    const mux = this.mux;
    // Its ports go back to the pod first: while its rules still point at devop-splice, the native connection (which
    // closes with the tunnel) must stay up, or the clients that come meanwhile would find no session there.
    await this.ctx.ports.release(this.sessionId);
    this.mux = undefined;
    if (mux && !mux.closed) {
      mux.send({ type: 'bye', reason });
      mux.close(reason);
    }
    // A session that was disconnected has ended its native connection already (onClose).
    if (mux) this.nativeCall((n) => n.end(this.sessionId));
    this.ctx.log.info('session ended', { session: this.sessionId, user: this.who, reason });
    this.ctx.ended(this);
  }

  /** A request to devop-splice about this session; a failure means the session's steals stay with the agent. */
  private nativeCall(request: (native: NativeSplice) => Promise<void>): void {
    const native = this.ctx.native();
    if (!native) return;
    request(native).catch((err: Error) =>
      this.ctx.log.warn('native path request failed', { session: this.sessionId, error: err.message }),
    );
  }

  /** Enters or leaves the unsure state (takesTraffic): the session's ports are routed again either way. */
  private setUnsure(unsure: boolean, silentMs: number): void {
    if (unsure === this.unsure) return;
    this.unsure = unsure;
    const about = { session: this.sessionId, user: this.who, silentMs };
    if (unsure) this.ctx.log.warn('tunnel silent: new connections go to the pod until it speaks again', about);
    else this.ctx.log.info('tunnel speaks again: new connections come to the session', about);
    void this.ctx.ports.reroute(this.sessionId);
  }

  private onClose(mux: AgentMux, err: Error | undefined): void {
    if (this.mux !== mux || this.over) return;
    this.mux = undefined;
    this.unsure = false;
    // Its ports go back to the agent's listener (which sends their traffic to the pod meanwhile), then its native
    // connection ends (a resume joins again).
    if (this.nativeJoined) {
      this.nativeJoined = false;
      void this.ctx.ports.reroute(this.sessionId).then(() => this.nativeCall((n) => n.end(this.sessionId)));
    } else this.nativeCall((n) => n.end(this.sessionId));
    if (err instanceof ProtocolError) {
      // A client that sends bad frames is broken, not disconnected: no resume.
      this.ctx.log.error('session closed: bad frames', {
        session: this.sessionId,
        user: this.who,
        reason: err.message,
      });
      void this.end(`protocol error: ${err.message}`);
      return;
    }
    if (this.ctx.graceMs <= 0) {
      void this.end('disconnected');
      return;
    }
    // Meanwhile its stolen traffic goes to the pod's own app (PortRedirect skips sessions that are not connected).
    this.ctx.log.info('session disconnected, waiting for resume', {
      session: this.sessionId,
      user: this.who,
      graceMs: this.ctx.graceMs,
      reason: err?.message,
    });
    this.graceTimer = setTimeout(() => void this.end('not resumed in time'), this.ctx.graceMs);
  }

  private onMessage(mux: AgentMux, msg: ClientMessage): void {
    void this.handle(mux, msg).catch((err: Error) => {
      this.ctx.log.error('request failed', { session: this.sessionId, type: msg.type, error: err.message });
      const id = 'id' in msg && typeof msg.id === 'string' ? msg.id : undefined;
      mux.send({ type: 'error', id, code: 'internal', message: err.message.slice(0, MAX_REASON) });
    });
  }

  private async handle(mux: AgentMux, msg: ClientMessage): Promise<void> {
    switch (msg.type) {
      case 'ping':
        mux.send({ type: 'pong', id: msg.id, sentAt: msg.sentAt });
        return;
      case 'pong':
        return;
      case 'hello':
        mux.send({ type: 'error', code: 'bad_request', message: 'hello was already received on this connection' });
        return;
      case 'nativeJoin':
        mux.send({
          type: 'error',
          code: 'bad_request',
          message: 'nativeJoin goes on the native connection (the second port of the port-forward), not the tunnel',
        });
        return;
      case 'subscribe': {
        const res = await this.ctx.ports.subscribe(this, this.client, msg);
        if (res.ok) mux.send({ type: 'subscribed', id: msg.id, port: msg.port, mode: msg.mode });
        else
          mux.send({
            type: 'refused',
            id: msg.id,
            port: msg.port,
            reason: res.reason.slice(0, MAX_REASON),
            holder: res.holder,
            hint: res.hint?.slice(0, MAX_REASON),
          });
        return;
      }
      case 'unsubscribe':
        await this.ctx.ports.unsubscribe(this.sessionId, msg.port, msg.id);
        mux.send({ type: 'unsubscribed', id: msg.id, port: msg.port });
        return;
      case 'pause':
      case 'resume':
        await this.ctx.ports.setPaused(this.sessionId, msg.type === 'pause', msg.port);
        return;
      case 'dnsResolve':
        try {
          const addresses = await resolveInPod(this.ctx.pid, msg.name, msg.family);
          mux.send({ type: 'dnsResult', id: msg.id, addresses });
        } catch (err) {
          const code = err instanceof DnsError ? err.code : 'ESERVFAIL';
          mux.send({ type: 'dnsResult', id: msg.id, addresses: [], error: { code, message: (err as Error).message } });
        }
        return;
      case 'envRead':
        if (this.ctx.pid === undefined) {
          mux.send({
            type: 'error',
            id: msg.id,
            code: 'unsupported',
            message: 'this agent runs targetless: there is no container env to read',
            hint: 'give a target to read its env',
          });
          return;
        }
        try {
          mux.send({ type: 'env', id: msg.id, vars: await readTargetEnv(this.ctx.pid) });
        } catch (err) {
          const denied = deniedByCapabilities(err, "reading the target's environment");
          mux.send({
            type: 'error',
            id: msg.id,
            code: 'env',
            message: denied?.message ?? (err as Error).message,
            hint: denied?.hint,
          });
        }
        return;
      case 'bye':
        await this.end(`client said bye: ${msg.reason}`);
        return;
    }
  }

  private onStream(stream: MuxStream): void {
    const open = stream.open;
    stream.on('error', () => undefined);
    if (open.kind === 'outgoing') void serveOutgoing(stream, open.host, open.port, this.ctx.pid, this.ctx.log);
    else if (open.kind === 'udp') serveUdp(stream, this.ctx.pid, this.ctx.log);
    else if (open.kind === 'file') {
      if (this.ctx.pid === undefined)
        stream.reset('ENOTSUP: this agent runs targetless: there is no container filesystem');
      else void serveFile(stream, open.path, this.ctx.pid);
    } else stream.reset(`EINVAL: a client may not open ${open.kind} streams`);
  }
}
