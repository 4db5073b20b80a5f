// A devop session as the CLI would run it, for the agent suites and bench/steal.ts: connects through the relay, says
// hello, subscribes, and serves incoming streams from a local HTTP server in the test process (the "local command").
import { randomUUID } from 'node:crypto';
import { connect, type Socket } from 'node:net';
import { createServer, type Server } from 'node:http';
import { createClientMux, type ClientMux, type MuxStream } from '../shared/mux.js';
import {
  PROTOCOL_VERSION,
  type AgentMessage,
  type ClientMessage,
  type HttpFilter,
  type TlsMaterial,
  type StreamOpen,
  type TrafficEvent,
} from '../shared/protocol.js';

export interface LocalCommand {
  server: Server;
  port: number;
  /** "METHOD URL" of each request it served. */
  requests: string[];
  close(): Promise<void>;
}

/** The "local command": an HTTP server on 127.0.0.1 that says who it is. */
export async function startLocalCommand(name: string): Promise<LocalCommand> {
  const requests: string[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      requests.push(`${req.method} ${req.url}`);
      res.setHeader('x-served-by', name);
      const body = Buffer.concat(chunks).toString();
      res.end(`${name}: ${req.method} ${req.url}${body ? ` body=${body}` : ''}`);
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return {
    server,
    port,
    requests,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

export interface TestSession {
  mux: ClientMux;
  socket: Socket;
  sessionId: string;
  messages: AgentMessage[];
  /** `native`: it came over the native connection (devop-splice), not the tunnel. */
  incoming: Array<{ open: Extract<StreamOpen, { kind: 'incoming' }>; data: Buffer[]; native: boolean }>;
  traffic: TrafficEvent[];
  /** The native connection, once joined (joinNative), and its socket. */
  native?: ClientMux;
  nativeSocket?: Socket;
  /** Opens the native connection (devop-splice's port, through a relay like the tunnel's) and joins the session. */
  joinNative(to: string | { host: string; port: number }): Promise<ClientMux>;
  closed: Promise<Error | undefined>;
  send(msg: ClientMessage): void;
  request<T extends AgentMessage['type']>(msg: ClientMessage, reply: T[]): Promise<Extract<AgentMessage, { type: T }>>;
  subscribe(
    port: number,
    mode: 'steal' | 'mirror',
    opts?: { filter?: HttpFilter; flush?: boolean; stealProbes?: boolean; answerWithinMs?: number; tls?: TlsMaterial },
  ): Promise<AgentMessage>;
}

/**
 * Connects a session to the agent's control port: through a relay's unix socket (as the suites do) or straight to a TCP
 * address (a session process inside the pod netns). Incoming streams are piped to the local command on
 * 127.0.0.1:`local.port` (when given); mirrored ones record their bytes only when `local` is undefined.
 * `resumeSessionId` resumes an earlier session; `features` (default: traffic) are those the hello lists.
 */
export async function connectSession(
  to: string | { host: string; port: number },
  opts: {
    local?: Pick<LocalCommand, 'port'>;
    token?: string;
    user?: string;
    resumeSessionId?: string;
    protocolVersion?: number;
    features?: string[];
  } = {},
): Promise<TestSession> {
  const socket = typeof to === 'string' ? connect(to) : connect(to);
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  socket.setNoDelay(true);
  const mux = createClientMux(socket);
  const messages: AgentMessage[] = [];
  const traffic: TrafficEvent[] = [];
  const incoming: TestSession['incoming'] = [];
  const closed = new Promise<Error | undefined>((r) => mux.once('close', r));
  mux.on('message', (msg) => {
    if (msg.type === 'ping') mux.send({ type: 'pong', id: msg.id, sentAt: msg.sentAt }); // as the CLI does
    messages.push(msg);
    if (msg.type === 'traffic') traffic.push(msg.event);
  });
  const onStream = (native: boolean) => (stream: MuxStream) => {
    if (stream.open.kind !== 'incoming') return stream.reset('unexpected stream');
    const record = { open: stream.open, data: [] as Buffer[], native };
    incoming.push(record);
    stream.on('data', (c: Buffer) => record.data.push(c));
    stream.on('error', () => undefined);
    if (!opts.local) return stream.resume();
    const upstream = connect({ host: '127.0.0.1', port: opts.local.port, noDelay: true, allowHalfOpen: true });
    upstream.on('error', () => stream.reset('local command refused'));
    stream.pipe(upstream).pipe(stream);
  };
  mux.on('stream', onStream(false));
  const request = <T extends AgentMessage['type']>(
    msg: ClientMessage,
    reply: T[],
  ): Promise<Extract<AgentMessage, { type: T }>> =>
    new Promise((resolve, reject) => {
      const id = 'id' in msg ? msg.id : undefined;
      const onClose = (err: Error | undefined): void => reject(err ?? new Error('session closed'));
      const onMsg = (m: AgentMessage): void => {
        if ((reply as string[]).includes(m.type) && (id === undefined || !('id' in m) || m.id === id)) {
          mux.off('message', onMsg);
          mux.off('close', onClose);
          resolve(m as Extract<AgentMessage, { type: T }>);
        }
      };
      mux.on('message', onMsg);
      mux.once('close', onClose);
      mux.send(msg);
    });
  const hello = await request(
    {
      type: 'hello',
      protocolVersion: opts.protocolVersion ?? PROTOCOL_VERSION,
      token: opts.token ?? 'test-token',
      client: { user: opts.user ?? 'alice', host: 'laptop', pid: process.pid, devopVersion: '0.1.0' },
      resumeSessionId: opts.resumeSessionId,
      features: opts.features ?? ['traffic'],
    },
    ['helloOk', 'error'],
  );
  if (hello.type !== 'helloOk') throw Object.assign(new Error(`hello refused: ${hello.message}`), { reply: hello });
  const session: TestSession = {
    mux,
    socket,
    sessionId: hello.sessionId,
    messages,
    incoming,
    traffic,
    closed,
    send: (msg) => mux.send(msg),
    request,
    subscribe: (port, mode, o = {}) =>
      request(
        {
          type: 'subscribe',
          id: `sub-${randomUUID()}`,
          port,
          mode,
          filter: o.filter,
          flush: o.flush ?? false,
          stealProbes: o.stealProbes ?? false,
          ...(o.answerWithinMs ? { answerWithinMs: o.answerWithinMs } : {}),
          ...(o.tls ? { tls: o.tls } : {}),
        },
        ['subscribed', 'refused'],
      ),
    joinNative: async (at) => {
      const conn = typeof at === 'string' ? connect(at) : connect(at);
      await new Promise<void>((resolve, reject) => conn.once('connect', resolve).once('error', reject));
      conn.setNoDelay(true);
      const native = createClientMux(conn);
      const answer = new Promise<AgentMessage>((resolve, reject) => {
        native.once('message', resolve);
        native.once('close', (err) => reject(err ?? new Error('the native connection closed before joining')));
      });
      native.send({ type: 'nativeJoin', token: hello.sessionId });
      const joined = await answer;
      if (joined.type !== 'nativeJoined')
        throw new Error(`the native connection did not join: ${JSON.stringify(joined)}`);
      native.on('stream', onStream(true));
      session.native = native;
      session.nativeSocket = conn;
      return native;
    },
  };
  return session;
}
