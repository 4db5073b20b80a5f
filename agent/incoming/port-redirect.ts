// One redirect listener per stolen port (or mirrored port, without packet capture): the redirect rule sends the port
// here, and each connection (or, with filtered steals, each HTTP request) goes to a session or on to the original app,
// with mirror copies on the side unless the port's capture makes them.
import { createServer as createTcpServer, connect, type Server, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { FilteredRequests } from './http-filter.js';
import { relayWithFallback } from './answer-fallback.js';
import type { AgentLog } from '../log.js';
import { MirroredConnection } from './mirror.js';
import { originOf, resetStream, type IncomingStream, type PortSubscription } from './subscription.js';
import { joinBothWays } from '../../shared/splice.js';
import { MuxStream } from '../../shared/mux-stream.js';

export class PortRedirect {
  private readonly server: Server;
  /** The IPv6 twin of `server` on the same port (IPv6 only), when the netns has IPv6: for IPv6 clients. */
  private readonly server6: Server;
  /** Set by enableFilters(), once the port has had a filtered steal. */
  private http: FilteredRequests | undefined;
  private readonly sockets = new Set<Socket>();
  /** Client connections passed on whole to the pod's app (no active steal when they came): what dropForwarded ends. */
  private readonly forwarded = new Set<Socket>();
  private nextConn = 0;
  listenerPort = 0;
  /** False while the port's packet capture makes the mirror copies: forwarded connections are then not copied again. */
  copiesMirrors = true;

  /**
   * `subs` is the port's subscription list, shared with its owner (agent/incoming/ports.ts), which changes it in place.
   */
  constructor(
    readonly port: number,
    readonly subs: PortSubscription[],
    private readonly log: AgentLog,
  ) {
    // allowHalfOpen: a client that shuts down its sending side after the request still gets the whole answer, as it
    // would from the app itself (the end is passed on, and this side ends when the other end's answer is done).
    this.server = createTcpServer({ noDelay: true, allowHalfOpen: true }, (socket) => this.onConnection(socket));
    this.server.on('error', (err) => log.error('redirect listener failed', { port, error: err.message }));
    this.server6 = createTcpServer({ noDelay: true, allowHalfOpen: true }, (socket) => this.onConnection(socket));
    this.server6.on('error', (err) => log.error('redirect listener failed', { port, ipv6: true, error: err.message }));
  }

  /** Before the port's first filtered steal counts: loads the HTTP routing (agent/incoming/http-filter.ts) for it. */
  async enableFilters(): Promise<void> {
    if (this.http) return;
    const { FilteredRequests } = await import('./http-filter.js');
    this.http ??= new FilteredRequests({
      port: this.port,
      active: () => this.active(),
      all: () => this.subs.map((s) => s.session),
      log: this.log,
      nextId: () => this.connId(),
    });
  }

  /**
   * Every address of the pod netns: a redirect in nat PREROUTING delivers to the primary address of the interface the
   * connection came in on (a listener on 127.0.0.1 would get nothing). What keeps direct connections to this port out
   * is the guard the port table adds before the rule (agent/incoming/ports.ts): only redirected connections get here.
   * Two sockets on one port, IPv4 and IPv6 only, rather than one dual-stack socket: IPv4 clients keep their plain
   * addresses (not ::ffff:a.b.c.d) in events, filters and on the way to the app. A netns without IPv6 gets the first.
   */
  async listen(): Promise<number> {
    this.listenerPort = await new Promise<number>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(0, '0.0.0.0', () => resolve((this.server.address() as { port: number }).port));
    });
    await new Promise<void>((resolve) => {
      const without = (err: Error) => {
        this.log.debug('no IPv6 redirect listener', { port: this.port, error: err.message });
        resolve();
      };
      this.server6.once('error', without);
      this.server6.listen({ port: this.listenerPort, host: '::', ipv6Only: true }, () => {
        this.server6.off('error', without);
        resolve();
      });
    });
    return this.listenerPort;
  }

  /** Stops accepting; connections in flight end with their sessions (or on their own when they go to the pod). */
  close(): void {
    this.server.close();
    if (this.server6.listening) this.server6.close();
    this.http?.close();
    for (const socket of this.sockets) socket.destroy();
  }

  /**
   * Ends the connections this listener passes on whole to the pod's app (opened while the steal was paused, or before
   * it existed): a keep-alive client then reconnects, and its new connection is routed to the steal. Returns how many.
   */
  dropForwarded(): number {
    const count = this.forwarded.size;
    for (const socket of this.forwarded) socket.destroy();
    this.forwarded.clear();
    return count;
  }

  /** Subscriptions whose session is connected and not paused: only those receive traffic. */
  private active(): PortSubscription[] {
    return this.subs.filter((s) => s.session.takesTraffic && !s.paused);
  }

  private connId(): string {
    return `${this.port}-${++this.nextConn}`;
  }

  private onConnection(socket: Socket): void {
    this.sockets.add(socket);
    const active = this.active();
    const whole = active.find((s) => s.mode === 'steal' && !s.match);
    // The stream's OPEN and the traffic event that announces it leave in one write (one wake-up of the tunnel's far
    // side instead of two, on every new connection).
    if (whole?.session.together(() => this.stealConnection(socket, whole))) return;
    // A filtered steal that is paused still has its requests routed one by one (none matches, all go to the pod): its
    // session lists them, as it lists the unmatched ones (a paused whole-port steal lists the connections instead).
    if (this.http && this.subs.some((s) => s.mode === 'steal' && s.match && s.session.takesTraffic)) {
      this.track(socket);
      this.http.take(socket);
      return;
    }
    const paused = this.subs.filter((s) => s.paused && s.mode === 'steal' && s.session.takesTraffic);
    this.forwardConnection(socket, this.copiesMirrors ? active.filter((s) => s.mode === 'mirror') : [], paused);
  }

  /** For a connection not spliced here (see splice()): forgets it when it closes, and keeps its errors handled. */
  private track(socket: Socket): void {
    socket.once('close', () => this.sockets.delete(socket));
    socket.on('error', () => socket.destroy());
  }

  private stealConnection(socket: Socket, sub: PortSubscription): boolean {
    let stream: IncomingStream;
    const id = this.connId();
    // A connection spliced whole to a session that reports it from the stream (stream-events) gets no traffic events
    // here; one that may fall back to the pod does, since only the agent knows where it went.
    const reported = sub.session.reportsStreams && !sub.answerWithinMs;
    try {
      stream = sub.session.openIncoming({
        kind: 'incoming',
        port: this.port,
        mode: 'steal',
        remoteAddress: socket.remoteAddress ?? '',
        remotePort: socket.remotePort ?? 0,
        subscriptionId: sub.id,
        ...(reported ? { connId: id } : {}),
      });
    } catch {
      return false; // the tunnel just went: the original app answers instead
    }
    if (reported) {
      this.splice(socket, stream, (reason) => resetStream(stream, reason), noEvent);
      return true;
    }
    sub.session.traffic({ ...connectionEvent(socket, id, this.port), to: 'local', phase: 'open', at: Date.now() });
    if (sub.answerWithinMs) {
      this.track(socket);
      const event = { ...connectionEvent(socket, id, this.port), to: 'local' as const };
      const relay = relayWithFallback(socket, stream, sub.answerWithinMs, originOf(socket, this.port), (afterMs) =>
        sub.session.traffic({ ...event, to: 'pod', phase: 'open', fallbackMs: afterMs, at: Date.now() }),
      );
      relay.done.then((r) =>
        sub.session.traffic({
          ...event,
          to: r.fellBack ? 'pod' : 'local',
          phase: 'close',
          bytesIn: r.in,
          bytesOut: r.out,
          at: Date.now(),
        }),
      );
      return true;
    }
    // The close event is made when it is sent, from the socket (which keeps its peer's address): nothing per
    // connection waits for it but this callback.
    this.splice(
      socket,
      stream,
      (reason) => resetStream(stream, reason),
      (bytesIn, bytesOut) =>
        sub.session.traffic({
          ...connectionEvent(socket, id, this.port),
          to: 'local',
          phase: 'close',
          bytesIn,
          bytesOut,
          at: Date.now(),
        }),
    );
    return true;
  }

  /** `paused`: the steals paused on the port; their sessions are told of the connection (it goes to the pod). */
  private forwardConnection(socket: Socket, mirrors: PortSubscription[], paused: PortSubscription[] = []): void {
    const origin = originOf(socket, this.port);
    const upstream = connect({ host: origin.host, port: origin.port, noDelay: true, allowHalfOpen: true });
    this.forwarded.add(socket);
    const told =
      paused.length === 0 ? undefined : { ...connectionEvent(socket, this.connId(), this.port), to: 'pod' as const };
    if (told) for (const s of paused) s.session.traffic({ ...told, phase: 'open', at: Date.now() });
    const mirrored =
      mirrors.length === 0
        ? undefined
        : new MirroredConnection(
            mirrors,
            this.port,
            this.connId(),
            { address: socket.remoteAddress ?? '', port: socket.remotePort ?? 0 },
            this.log,
          );
    this.splice(
      socket,
      upstream,
      () => upstream.destroy(),
      (bytesIn, bytesOut) => {
        mirrored?.close({ in: bytesIn, out: bytesOut });
        if (told)
          for (const s of paused) s.session.traffic({ ...told, phase: 'close', bytesIn, bytesOut, at: Date.now() });
      },
    );
    if (!mirrored) return;
    // Registered after the pipe to the app: the app gets each chunk first.
    socket.on('data', (chunk: Buffer) => mirrored.push(chunk));
    socket.once('end', () => mirrored.end());
  }

  /**
   * Joins a client socket and its peer both ways with half-close (a mux stream through the splice fast path, a socket
   * with pipe); an error on either side tears both down. `closed` gets the client socket's byte counts once both sides
   * closed. Every connection the listener takes comes here and a thousand kept-alive ones stay, so the listeners are
   * few: one per event, added with on() where the event comes once anyway ('close'; once() adds a wrapper per
   * listener), and no promise.
   */
  private splice(
    client: Socket,
    peer: Duplex,
    abortPeer: (reason: string) => void,
    closed: (bytesIn: number, bytesOut: number) => void,
  ): void {
    joinBothWays(client, peer);
    let open = 2;
    const sideClosed = (): void => {
      if (--open === 0) closed(client.bytesRead, client.bytesWritten);
    };
    client.on('close', () => {
      this.sockets.delete(client);
      this.forwarded.delete(client);
      // A client that vanished without a FIN (reset) takes its peer down too.
      if (!client.readableEnded) abortPeer('client connection reset');
      sideClosed();
    });
    client.on('error', () => {
      client.destroy();
      abortPeer('client connection error');
    });
    // A peer that failed takes the client down. Its 'close' follows its 'error' in the same tick, and a mux stream
    // keeps its own errors handled: only a socket needs an 'error' listener here, or its error would be thrown.
    peer.on('close', () => {
      if (peer.errored) client.destroy();
      sideClosed();
    });
    if (!(peer instanceof MuxStream)) peer.on('error', ignoreError);
  }
}

/** What the traffic events of a stolen connection say about it. */
function connectionEvent(
  socket: Socket,
  connId: string,
  port: number,
): { kind: 'connection'; connId: string; port: number; remoteAddress: string; remotePort: number } {
  return {
    kind: 'connection',
    connId,
    port,
    remoteAddress: socket.remoteAddress ?? '',
    remotePort: socket.remotePort ?? 0,
  };
}

function ignoreError(): void {
  // See splice(): the peer's 'close' handles it.
}

function noEvent(): void {
  // A connection its session reports from the stream: see stealConnection().
}
