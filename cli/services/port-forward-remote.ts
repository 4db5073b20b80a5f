// `devop port-forward -R`: a target pod's ports stolen (or mirrored) to local HOST:PORTs, with no local command — the
// subscriptions of `devop exec` on a supervised session (its steal locks, reconnects and restore), each stream the
// agent opens joined to its forward's local address; a local address nobody listens on answers HTTP with a 502.
import type { Socket } from 'node:net';
import { UserError } from '../../shared/errors.js';
import type { MuxStream } from '../../shared/mux.js';
import { connectOwnReads, ownReads } from '../../shared/own-reads.js';
import type { HttpFilter, StealMode } from '../../shared/protocol.js';
import { spliceSocket } from '../../shared/splice.js';
import { parseAuthority } from '../outgoing/http-connect.js';
import { canConnect } from '../process/listen.js';
import { type PortState, type Reporter, type SessionInfo, warn } from '../reporter.js';
import type { Session } from '../session/connect.js';
import { trafficToEvent } from '../session/traffic.js';
import type { ConnectionEvent } from './incoming.js';
import { agentMessageReporter } from './exec/agent-events.js';
import { describeFilter } from './exec/session-info.js';
import { TrafficControl } from './exec/traffic-control.js';

/** The local host of the short forms (`-R PORT`, `-R REMOTE:LOCAL`), as `devop exec` connects to its command. */
export const DEFAULT_LOCAL_HOST = '127.0.0.1';

export interface RemoteForward {
  /** The pod's port whose traffic is taken. */
  remotePort: number;
  /** Where it goes on this machine. */
  host: string;
  localPort: number;
  /** The spec as the user wrote it. */
  spec: string;
}

export interface RemoteTraffic {
  mode: StealMode;
  httpFilter?: HttpFilter;
  flush: boolean;
  stealProbes: boolean;
}

/**
 * Parses `[REMOTE:]HOST:PORT` (ssh -R's order; REMOTE defaults to PORT), and mirrord's `PORT` and `REMOTE:LOCAL`
 * (both on 127.0.0.1). HOST is a name, an IPv4 address or `[IPv6]`. `where` names the source in the error: `-R`, or
 * the devop.json key.
 */
export function parseRemoteForward(spec: string, where = '-R'): RemoteForward {
  const bad = (why: string): UserError =>
    new UserError(
      `${where} ${spec}: ${why}`,
      'write -R [REMOTE_PORT:]LOCAL_HOST:LOCAL_PORT, e.g. -R 8080:localhost:3000 (pod port 8080 to local 3000), ' +
        'or -R 3000 (pod port 3000 to 127.0.0.1:3000)',
    );
  const text = spec.trim();
  const port = (digits: string, which: string): number => {
    const n = Number(digits);
    if (!Number.isInteger(n) || n < 1 || n > 65535) throw bad(`the ${which} port must be 1..65535`);
    return n;
  };
  const numeric = /^(?:(\d{1,5}):)?(\d{1,5})$/.exec(text);
  if (numeric) {
    const localPort = port(numeric[2], 'local');
    const remotePort = numeric[1] === undefined ? localPort : port(numeric[1], 'pod');
    return { remotePort, host: DEFAULT_LOCAL_HOST, localPort, spec };
  }
  const match = /^(?:(\d{1,5}):)?(\[[^\]]+\]|[^:[\]]+):(\d{1,5})$/.exec(text);
  if (!match) throw bad('not [REMOTE_PORT:]LOCAL_HOST:LOCAL_PORT');
  const local = parseAuthority(`${match[2]}:${match[3]}`);
  if (!local) throw bad('the local port must be 1..65535');
  const remotePort = match[1] === undefined ? local.port : port(match[1], 'pod');
  return { remotePort, host: local.host, localPort: local.port, spec };
}

/** Every spec parsed, each pod port once (one subscription each). */
export function parseRemoteForwards(specs: readonly string[], where = '-R'): RemoteForward[] {
  const forwards = specs.map((spec) => parseRemoteForward(spec, where));
  const seen = new Set<number>();
  for (const f of forwards) {
    if (seen.has(f.remotePort))
      throw new UserError(
        `${where}: pod port ${f.remotePort} is given twice`,
        'give each pod port once (one local address per pod port)',
      );
    seen.add(f.remotePort);
  }
  return forwards;
}

/** `host:port`, with an IPv6 host in brackets. */
export function localAddress(f: Pick<RemoteForward, 'host' | 'localPort'>): string {
  return `${f.host.includes(':') ? `[${f.host}]` : f.host}:${f.localPort}`;
}

/** How long a stream whose local address refused it waits for the client's first bytes to tell HTTP from not. */
const FIRST_BYTES_MS = 2000;
/** A request line of HTTP/1 (what the 502 can answer); anything else (TLS, HTTP/2, other protocols) gets a reset. */
const HTTP1_REQUEST = /^[A-Z]{3,16} \S+ HTTP\/1\.[01]\r?\n/;

/** The 502 a client gets when nothing listens at its forward's local address: one line saying why and the fix. */
export function nothingListensAnswer(forward: RemoteForward, code: string): Buffer {
  const body =
    `devop port-forward: nothing listens on ${localAddress(forward)} (${code}), where -R ${forward.spec} sends ` +
    `this pod's port ${forward.remotePort} — fix: start the local server there, or stop devop port-forward (the pod ` +
    'then answers again)\n';
  return Buffer.from(
    'HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n' +
      `content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
}

/** The client's first bytes on a stream (what is buffered, else the first chunk within FIRST_BYTES_MS). */
function firstBytes(stream: MuxStream): Promise<Buffer | undefined> {
  const buffered = stream.read() as Buffer | null;
  if (buffered) return Promise.resolve(buffered);
  return new Promise((resolve) => {
    const done = (chunk: Buffer | undefined): void => {
      clearTimeout(timer);
      stream.off('readable', onReadable);
      stream.off('close', onClose);
      resolve(chunk);
    };
    const onReadable = (): void => {
      const chunk = stream.read() as Buffer | null;
      if (chunk) done(chunk);
    };
    const onClose = (): void => done(undefined);
    const timer = setTimeout(() => done(undefined), FIRST_BYTES_MS);
    stream.on('readable', onReadable);
    stream.once('close', onClose);
  });
}

/**
 * Says once per forward that its local address refuses connections, and again only after it has accepted one in
 * between: a client retrying in a loop makes one line, not one per request.
 */
class LocalFailures {
  private readonly failing = new Set<number>();
  constructor(private readonly reporter: Reporter) {}

  failed(forward: RemoteForward, code: string, mode: StealMode, pod: string | undefined): void {
    if (this.failing.has(forward.remotePort)) return;
    this.failing.add(forward.remotePort);
    const clients =
      mode === 'steal'
        ? 'its HTTP requests get a 502 from devop, other connections a reset'
        : 'the pod still answers; the copies are dropped';
    warn(
      this.reporter,
      `-R ${forward.spec}: nothing listens on ${localAddress(forward)} (${code}) for port ${forward.remotePort} of ` +
        `pod ${pod ?? '?'}: ${clients} — fix: start the local server on ${localAddress(forward)}`,
    );
  }

  accepted(forward: RemoteForward): void {
    this.failing.delete(forward.remotePort);
  }
}

/** The 'stream' listener: each incoming stream to its forward's local address; steal both ways, mirror one way. */
function remoteStreamHandler(
  forwards: readonly RemoteForward[],
  failures: LocalFailures,
  onConnection: (event: ConnectionEvent, pod: string | undefined) => void,
): (stream: MuxStream, pod?: string) => void {
  return (stream, pod) => {
    stream.on('error', () => undefined);
    if (stream.open.kind !== 'incoming') {
      stream.reset('unsupported stream kind');
      return;
    }
    const { port, mode, connId, remoteAddress, remotePort } = stream.open;
    if (connId !== undefined) {
      // stream-events: the agent leaves a whole connection's open and close events to its stream, as exec reports them.
      const event = { kind: 'connection', connId, port, remoteAddress, remotePort, to: 'local' } as const;
      onConnection({ ...event, phase: 'open', at: Date.now() }, pod);
      stream.once('close', () =>
        onConnection(
          { ...event, phase: 'close', bytesIn: stream.bytesReceived, bytesOut: stream.bytesSent, at: Date.now() },
          pod,
        ),
      );
    }
    const forward = forwards.find((f) => f.remotePort === port);
    if (!forward) {
      stream.reset(`no local address for port ${port}`);
      return;
    }
    // Connected before the stream is delivered: a refused local address can still answer the client's request itself.
    const socket: Socket = connectOwnReads({ host: forward.host, port: forward.localPort, allowHalfOpen: true });
    socket.setNoDelay(true);
    const refused = (err: NodeJS.ErrnoException): void => {
      const code = err.code ?? err.message;
      failures.failed(forward, code, mode, pod);
      void answerRefused(stream, forward, code, mode);
    };
    socket.once('error', refused);
    socket.once('connect', () => {
      socket.off('error', refused);
      failures.accepted(forward);
      socket.on('error', (err: NodeJS.ErrnoException) => stream.reset(err.code ?? 'ECONNRESET'));
      stream.on('error', () => socket.destroy());
      socket.on('close', () => {
        if (!stream.writableEnded && !stream.destroyed) stream.end();
      });
      if (mode === 'mirror') {
        // The pod answers the client; the local answer is read (so the local server is not blocked) and dropped.
        stream.deliverTo(socket);
        socket.on('end', () => stream.end());
        ownReads(socket)?.start(() => 'released');
      } else {
        spliceSocket(stream, socket);
      }
    });
  };
}

/** A stolen HTTP/1 request gets the 502 that says why; any other stream (and a mirrored copy) is reset. */
async function answerRefused(stream: MuxStream, forward: RemoteForward, code: string, mode: StealMode): Promise<void> {
  if (mode !== 'steal') {
    stream.reset(code);
    return;
  }
  const first = await firstBytes(stream);
  if (stream.destroyed) return;
  if (!first || !HTTP1_REQUEST.test(first.subarray(0, 256).toString('latin1'))) {
    stream.reset(code);
    return;
  }
  // The rest of the request is read and dropped, so the client's sends are not held up by credit.
  stream.resume();
  stream.end(nothingListensAnswer(forward, code));
}

export interface RemoteForwarding {
  /** Says `ready` with the session line (the pod, its taken ports) and binds the reporter's keys, as exec does. */
  markReady(): void;
  /** Gives the pod's ports back (unsubscribes); the session's close releases its Leases. */
  release(): Promise<void>;
}

/** The session line's ports: each forward's pod port, taken as `traffic` says. */
export function remotePortStates(forwards: readonly RemoteForward[], traffic: RemoteTraffic): PortState[] {
  return forwards.map((f) => ({
    remotePort: f.remotePort,
    localPort: f.localPort,
    mode: traffic.mode,
    filter: describeFilter(traffic.httpFilter),
  }));
}

/**
 * Takes the forwards' pod ports on `session` (one with a target) with exec's TrafficControl — its subscriptions go
 * through the supervised session's gate, so unfiltered steals take the workload's Lease — and joins the streams the
 * agent opens to the forwards' local addresses. `info` is the session line; its ports are the forwards'.
 */
export async function startRemoteForwards(
  session: Session,
  forwards: readonly RemoteForward[],
  traffic: RemoteTraffic,
  info: SessionInfo,
  reporter: Reporter,
): Promise<RemoteForwarding> {
  const pod = session.target?.podName;
  const failures = new LocalFailures(reporter);
  const onStream = remoteStreamHandler(forwards, failures, (connection, from) => {
    const event = trafficToEvent(connection, from ?? pod);
    if (event) reporter.emit(event);
  });
  // The agent's words about this session, as `devop exec` shows them: requests and answers, its log, its errors.
  const onMessage = agentMessageReporter(pod, reporter);
  session.tunnel.on('stream', onStream);
  session.tunnel.on('message', onMessage);
  // A local address that refuses now is said once before the ports are taken (the steal goes on: it may start later).
  await Promise.all(
    forwards.map(async (f) => {
      if (!(await canConnect(f.localPort, f.host))) failures.failed(f, 'ECONNREFUSED', traffic.mode, pod);
    }),
  );
  const control = new TrafficControl(
    session,
    { ...info, ports: remotePortStates(forwards, traffic) },
    traffic,
    reporter,
  );
  session.onRetarget?.((change) => control.retarget(change));
  const release = async (): Promise<void> => {
    await control.release();
    session.tunnel.off('stream', onStream);
    session.tunnel.off('message', onMessage);
  };
  try {
    await control.subscribeAll();
  } catch (err) {
    await release();
    throw err;
  }
  return { markReady: () => control.markReady(), release };
}
