// What a redirect listener and its helpers (HTTP filter, mirror copies, capture) share: a port's subscriptions, the
// session they belong to as the listeners see it, and the incoming streams opened to it.
import type { IncomingHttpHeaders } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { HttpFilter, StealMode, StreamOpen, TlsMaterial, TrafficEvent } from '../../shared/protocol.js';

/** What a filter looks at in a request. */
export interface RequestHead {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  /** The parsed JSON body, read only for a filter that needs it; absent when there is none or it is not JSON. */
  body?: { json: unknown };
}

/** A compiled filter (agent/incoming/filter.ts); `needsBody`: it reads the JSON body, so the body is read first. */
export type RequestMatcher = ((req: RequestHead) => boolean) & { needsBody?: boolean };

export type IncomingOpen = Extract<StreamOpen, { kind: 'incoming' }>;
export type IncomingStream = Duplex & { reset?: (reason: string) => void };

/** A session as the listeners see it. `openIncoming` throws when the session's tunnel is down. */
export interface IncomingTarget {
  readonly sessionId: string;
  /** Its tunnel is up and not silent: new connections may come to it. */
  readonly takesTraffic: boolean;
  /** Its tunnel is up (a disconnected session waits for its CLI to resume). */
  readonly connected: boolean;
  /** The client makes a whole connection's traffic events from its stream (stream-events): none are sent for it. */
  readonly reportsStreams: boolean;
  /** Its native connection (native-splice) has joined devop-splice, which can take its whole steals. */
  readonly native: boolean;
  openIncoming(open: IncomingOpen): IncomingStream;
  traffic(event: TrafficEvent): void;
  /** Runs `fn`; the frames it makes reach the session in one write (a stream's OPEN with its traffic event). */
  together<T>(fn: () => T): T;
  warn(message: string): void;
}

export interface PortSubscription {
  id: string;
  session: IncomingTarget;
  mode: StealMode;
  filter?: HttpFilter;
  match?: RequestMatcher;
  since: Date;
  paused: boolean;
  /** The subscribe's flush: connections the pod took meanwhile move to the session when its steal takes effect. */
  flush?: boolean;
  holder: { user: string; host: string };
  /** Webhook steals: a connection the session has not answered within this many ms is answered by the pod. */
  answerWithinMs?: number;
  /** Filtered steals of a port the workload serves TLS on: its certificate and key (incoming/tls-terminate.ts). */
  tls?: TlsMaterial;
}

export function resetStream(stream: IncomingStream, reason: string): void {
  if (stream.reset) stream.reset(reason);
  else stream.destroy();
}

/** A redirected connection's original destination: the address it arrived on (REDIRECT keeps the interface's). */
export function originOf(socket: Socket, port: number): { host: string; port: number } {
  const local = socket.localAddress ?? '127.0.0.1';
  return { host: local.startsWith('::ffff:') ? local.slice(7) : local, port };
}

/** Human-readable form of a filter, for logs and refusals. */
export function describeFilter(filter: HttpFilter | undefined): string {
  if (!filter) return 'the whole port';
  const parts = [
    filter.header && `header ${filter.header}`,
    filter.path && `path ${filter.path}`,
    filter.method && `method ${filter.method}`,
  ].filter(Boolean);
  return parts.join(filter.match === 'any' ? ' or ' : ' and ');
}
