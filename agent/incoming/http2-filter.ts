// Filtered steal for HTTP/2 without TLS (h2c, prior knowledge): the agent ends the client's HTTP/2 connection and
// routes each stream by the filters, a matched one to its session (one h2c connection to the local command per
// subscription, over an incoming stream of its own) and every other one to the pod's app (one h2c connection per port).
import {
  connect as connectHttp2,
  constants,
  createServer,
  type ClientHttp2Session,
  type ClientHttp2Stream,
  type Http2Server,
  type IncomingHttpHeaders,
  type OutgoingHttpHeaders,
  type ServerHttp2Stream,
} from 'node:http2';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { isJsonContentType, MAX_FILTERED_BODY_BYTES } from '../../shared/body-filter.js';
import { grpcCall, grpcStatusOf } from './grpc.js';
import { originOf, resetStream, type IncomingStream, type PortSubscription } from './subscription.js';
import type { AgentLog } from '../log.js';
import type { IncomingTarget } from './subscription.js';
import { encryptTowardsLocal, encryptTowardsPod, terminatedOf } from './tls-terminate.js';

/** What every HTTP/2 connection starts with (RFC 9113 §3.4); an HTTP/1.x request line never does. */
export const HTTP2_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');

export interface Http2Routing {
  port: number;
  active(): PortSubscription[];
  all(): IncomingTarget[];
  log: AgentLog;
  nextId(): string;
}

/** Connection-specific headers are not allowed in HTTP/2 (RFC 9113 §8.2.2); pseudo-headers are set per side. */
const NOT_FORWARDED = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade']);

/** No server push on either side: the agent could not tell whose stream a pushed one would be. */
const NO_PUSH = { settings: { enablePush: false } };

function forwardable(headers: IncomingHttpHeaders, keepPseudo: boolean): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || NOT_FORWARDED.has(name)) continue;
    if (name.startsWith(':') && !keepPseudo) continue;
    out[name] = value;
  }
  return out;
}

/** The request's pseudo-headers a filter looks at, and the rest as they came. */
function requestHead(headers: IncomingHttpHeaders): { method: string; path: string; plain: Record<string, string> } {
  const plain: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers))
    if (!name.startsWith(':') && value !== undefined) plain[name] = Array.isArray(value) ? value.join(', ') : value;
  return { method: String(headers[':method'] ?? 'GET'), path: String(headers[':path'] ?? '/'), plain };
}

/** The start of a stream's body read for a body filter: whole (`ended`), or its first chunks when it is longer. */
interface BodyPrefix {
  chunks: Buffer[];
  ended: boolean;
}

/**
 * Reads a request stream's DATA up to MAX_FILTERED_BODY_BYTES for a body filter; undefined when the client reset the
 * stream first. Past the bound the stream is paused: Node then stops giving the client's DATA back to its window
 * (no WINDOW_UPDATE), so what the agent holds for an undecided stream stays within the bound plus one stream window.
 */
function readStreamPrefix(stream: ServerHttp2Stream): Promise<BodyPrefix | undefined> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let bytes = 0;
    const finish = (result: BodyPrefix | undefined): void => {
      stream.off('data', onData);
      stream.off('end', onEnd);
      stream.off('close', onClose);
      if (result && !result.ended) stream.pause();
      resolve(result);
    };
    const onData = (chunk: Buffer): void => {
      chunks.push(chunk);
      bytes += chunk.length;
      if (bytes > MAX_FILTERED_BODY_BYTES) finish({ chunks, ended: false });
    };
    const onEnd = (): void => finish({ chunks, ended: true });
    const onClose = (): void => finish(undefined);
    stream.on('data', onData);
    stream.once('end', onEnd);
    stream.once('close', onClose);
  });
}

/**
 * One request stream to another HTTP/2 peer and its answer back: headers, body both ways under each side's flow control
 * (pipe), trailers (gRPC's grpc-status), and a reset either way. `read`: the body's start, already read for a body
 * filter, sent first (the rest follows by pipe).
 */
function relayStream(
  from: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
  to: ClientHttp2Session,
  failed: (err: Error) => void,
  read?: BodyPrefix,
): ClientHttp2Stream {
  const bodyless = read ? read.ended && read.chunks.length === 0 : from.endAfterHeaders;
  const out = to.request(forwardable(headers, true), { endStream: bodyless });
  let trailers: OutgoingHttpHeaders = {};
  out.on('trailers', (t) => {
    trailers = forwardable(t, false);
  });
  out.on('response', (answer, flags) => {
    if (from.destroyed) return;
    // A trailers-only answer (gRPC's way to fail a call at once: grpc-status in the one HEADERS frame) stays one frame.
    if (flags & constants.NGHTTP2_FLAG_END_STREAM) {
      from.respond(forwardable(answer, true), { endStream: true });
      return;
    }
    from.respond(forwardable(answer, true), { waitForTrailers: true });
    from.once('wantTrailers', () => from.sendTrailers(trailers));
    out.pipe(from);
  });
  out.on('error', (err) => {
    if (from.destroyed) return;
    if (!from.headersSent) {
      failed(err);
      from.respond({ ':status': 502, 'content-type': 'text/plain' });
      from.end(`devop agent: ${err.message}\n`);
    } else from.close(constants.NGHTTP2_INTERNAL_ERROR);
  });
  // A reset from the far side reaches the client with its code, and one from the client reaches the far side.
  out.on('close', () => {
    if (out.rstCode && out.rstCode !== constants.NGHTTP2_NO_ERROR && !from.destroyed) from.close(out.rstCode);
  });
  from.on('close', () => {
    if (!out.destroyed && from.rstCode !== constants.NGHTTP2_NO_ERROR)
      out.close(from.rstCode ?? constants.NGHTTP2_CANCEL);
  });
  from.on('error', () => undefined); // its close (above) carries what happened
  if (read) {
    if (!bodyless) {
      for (const chunk of read.chunks) out.write(chunk);
      if (read.ended) out.end();
      else from.pipe(out);
    }
  } else if (!from.endAfterHeaders) from.pipe(out);
  return out;
}

/**
 * A port's HTTP/2 connections under filtered steals: the h2c server they are handed to, and the one connection to the
 * pod's app its unmatched streams share (opened again when the app closed it).
 */
export class FilteredStreams {
  private readonly server: Http2Server;
  private pod: ClientHttp2Session | undefined;
  /** Per subscription id, its h2c connection to the local command, shared by the streams it gets. */
  private readonly locals = new Map<string, ClientHttp2Session>();

  constructor(private readonly routing: Http2Routing) {
    this.server = createServer(NO_PUSH);
    this.server.on('stream', (stream, headers) => this.decide(stream, headers));
    this.server.on('sessionError', (err) =>
      routing.log.debug('HTTP/2 client connection failed', { error: err.message }),
    );
  }

  /** An HTTP/2 connection the redirect listener accepted (its preface already read and put back). */
  take(socket: Socket): void {
    this.routing.log.info('HTTP/2 connection, routed per stream', {
      port: this.routing.port,
      from: `${socket.remoteAddress}:${socket.remotePort}`,
    });
    this.server.emit('connection', socket);
  }

  close(): void {
    this.server.close();
    this.pod?.destroy();
    for (const local of this.locals.values()) local.destroy();
    this.locals.clear();
  }

  /**
   * A stream on a port whose steal has a body filter, with a JSON body: its body is read first (up to
   * MAX_FILTERED_BODY_BYTES; a longer one goes to the pod, saying why), then it is routed as any other. Other bodies
   * (gRPC's protobuf messages among them) are never held: the body filter does not match them, and a streaming call
   * that waits for an answer before it sends more would wait for good.
   */
  private decide(stream: ServerHttp2Stream, headers: IncomingHttpHeaders): void {
    const needsBody = this.routing.active().some((s) => s.mode === 'steal' && s.match?.needsBody);
    if (!needsBody || stream.endAfterHeaders || !isJsonContentType(String(headers['content-type'] ?? ''))) {
      this.route(stream, headers);
      return;
    }
    void readStreamPrefix(stream).then((read) => {
      if (!read) return; // the client reset the stream before it was decided: nothing to route
      if (!read.ended) {
        const note = `body over ${MAX_FILTERED_BODY_BYTES / 1024} KiB: the body filter cannot read it, the pod answers`;
        this.route(stream, headers, { read, toPod: true, note });
        return;
      }
      let body: { json: unknown } | undefined;
      try {
        body = { json: JSON.parse(Buffer.concat(read.chunks).toString('utf8')) };
      } catch {
        body = undefined; // not JSON after all: the body criterion does not match
      }
      this.route(stream, headers, { read, body });
    });
  }

  private route(
    stream: ServerHttp2Stream,
    headers: IncomingHttpHeaders,
    decided: { read?: BodyPrefix; body?: { json: unknown }; toPod?: boolean; note?: string } = {},
  ): void {
    const started = Date.now();
    this.dropEndedLocals();
    const requestId = this.routing.nextId();
    const { method, path, plain } = requestHead(headers);
    const head = { method, url: path, headers, body: decided.body };
    const sub = decided.toPod
      ? undefined
      : this.routing.active().find((s) => s.mode === 'steal' && s.match !== undefined && s.match(head));
    const socket = stream.session?.socket as Socket | undefined;
    const local = sub ? this.toSession(sub, socket, { method, path, headers: plain }) : undefined;
    const to = local ? 'local' : 'pod';
    const listeners = local && sub ? [sub.session] : this.routing.all();
    const port = this.routing.port;
    const grpc = grpcCall(headers);
    const note = decided.note ? { note: decided.note } : {};
    for (const s of listeners)
      s.traffic({
        kind: 'request',
        requestId,
        port,
        method,
        path,
        to,
        at: started,
        ...(grpc ? { grpc } : {}),
        ...note,
      });
    let status = 0;
    let bytes = 0;
    let grpcStatus: ReturnType<typeof grpcStatusOf>;
    const out = relayStream(
      stream,
      headers,
      local ?? this.toPod(socket),
      (err) =>
        this.routing.log.debug(`HTTP/2 stream to the ${to === 'local' ? 'session' : 'pod'} failed`, {
          port,
          error: err.message,
        }),
      decided.read,
    );
    // Counted once the answer is piped to the client: a 'data' listener before that would start the flow too early.
    out.on('response', (answer) => {
      status = Number(answer[':status'] ?? 0);
      if (grpc) grpcStatus = grpcStatusOf(answer);
      out.on('data', (chunk: Buffer) => {
        bytes += chunk.length;
      });
    });
    if (grpc)
      out.on('trailers', (trailers) => {
        grpcStatus = grpcStatusOf(trailers);
      });
    stream.once('close', () => {
      for (const s of listeners)
        s.traffic({
          kind: 'response',
          requestId,
          port,
          status,
          durationMs: Date.now() - started,
          bytes,
          to,
          at: Date.now(),
          ...grpcStatus,
        });
    });
  }

  /** The shared connection to the pod's app, at the address the client's connection arrived on. */
  private toPod(socket: Socket | undefined): ClientHttp2Session {
    if (this.pod && !this.pod.closed && !this.pod.destroyed) return this.pod;
    const origin = socket ? originOf(socket, this.routing.port) : { host: '127.0.0.1', port: this.routing.port };
    // A connection whose TLS the agent ended (tls-terminate.ts) reaches the pod's own TLS listener again.
    const tls = terminatedOf(socket);
    const pod = tls
      ? connectHttp2(`https://${origin.host}:${origin.port}`, {
          ...NO_PUSH,
          createConnection: () => encryptTowardsPod(origin, tls),
        })
      : connectHttp2(`http://${origin.host}:${origin.port}`, NO_PUSH);
    pod.on('error', (err) => this.routing.log.debug('HTTP/2 connection to the pod failed', { error: err.message }));
    pod.once('close', () => {
      if (this.pod === pod) this.pod = undefined;
    });
    // An idle connection to the app does not keep the agent's event loop alive on its own.
    pod.unref();
    this.pod = pod;
    return pod;
  }

  /** Connections to the local command of subscriptions that ended: closed once their streams are done. */
  private dropEndedLocals(): void {
    if (this.locals.size === 0) return;
    const live = new Set(this.routing.active().map((s) => s.id));
    for (const [id, local] of this.locals)
      if (!live.has(id)) {
        this.locals.delete(id);
        local.close();
      }
  }

  /**
   * The subscription's h2c connection to the local command: an incoming stream to the session (the CLI dials the local
   * port for it, as for an HTTP/1.x request) opened for its first matched stream and kept for the next ones, so a call
   * does not wait for a new connection's dial and SETTINGS exchange across the tunnel; undefined when the session's
   * tunnel is down. `request` names the stream that opened it.
   */
  private toSession(
    sub: PortSubscription,
    socket: Socket | undefined,
    request: { method: string; path: string; headers: Record<string, string> },
  ): ClientHttp2Session | undefined {
    const pooled = this.locals.get(sub.id);
    if (pooled && !pooled.closed && !pooled.destroyed) return pooled;
    let stream: IncomingStream;
    try {
      stream = sub.session.openIncoming({
        kind: 'incoming',
        port: this.routing.port,
        mode: 'steal',
        remoteAddress: socket?.remoteAddress ?? '',
        remotePort: socket?.remotePort ?? 0,
        subscriptionId: sub.id,
        request,
      });
    } catch {
      return undefined;
    }
    stream.on('error', () => undefined); // a reset after the answer is complete is not an error for the client
    // In TLS again when the client's was: the local command serves the workload's certificate, as the pod does.
    const tls = terminatedOf(socket);
    const local = connectHttp2(tls ? 'https://localhost' : 'http://localhost', {
      ...NO_PUSH,
      createConnection: () => (tls ? encryptTowardsLocal(stream, tls) : (stream as Duplex as Socket)),
    });
    local.on('error', () => resetStream(stream, 'HTTP/2 connection to the local command failed'));
    local.once('close', () => {
      if (this.locals.get(sub.id) === local) this.locals.delete(sub.id);
      stream.end();
    });
    this.locals.set(sub.id, local);
    return local;
  }
}
