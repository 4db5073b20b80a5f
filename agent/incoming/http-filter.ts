// Filtered steal: each HTTP/1.1 request on a redirected connection goes to the first session whose filter matches (one
// mux stream per request, so keep-alive connections may interleave destinations), every other one to the original app;
// a connection that opens with the HTTP/2 preface is routed per stream (agent/incoming/http2-filter.ts).
import { request as httpsRequest, Agent as HttpsAgent } from 'node:https';
import {
  createServer,
  request as httpRequest,
  Agent,
  type IncomingMessage,
  type Server,
  type ServerResponse,
  type OutgoingHttpHeaders,
} from 'node:http';
import { connect, type Socket } from 'node:net';
import { PassThrough, type Readable } from 'node:stream';
import {
  originOf,
  resetStream,
  type IncomingStream,
  type IncomingTarget,
  type PortSubscription,
} from './subscription.js';
import type { AgentLog } from '../log.js';
import { joinBothWays } from '../../shared/splice.js';
import { MAX_REQUEST_HEAD_BYTES } from '../../shared/filter-regex.js';
import { isJsonContentType, MAX_FILTERED_BODY_BYTES } from '../../shared/body-filter.js';
import { FilteredStreams, HTTP2_PREFACE } from './http2-filter.js';
import { declineH2cOffer, offersH2c, requestHead } from './h2c-upgrade.js';
import {
  clientHelloKind,
  encryptTowardsLocal,
  encryptTowardsPod,
  noCertificateWarning,
  terminatedOf,
  terminateTls,
  upstreamTls,
} from './tls-terminate.js';

export interface HttpRouting {
  port: number;
  active(): PortSubscription[];
  all(): IncomingTarget[];
  log: AgentLog;
  nextId(): string;
  /** Kept-alive connections to the pod's app, for the requests no filter matches. */
  pod: Agent;
  /** The same over TLS, for the requests of connections whose TLS the agent terminated (tls-terminate.ts). */
  podTls: HttpsAgent;
}

/** At most this many idle connections to the pod's app are kept per port (the rest close when their request ends). */
const POD_IDLE_CONNECTIONS = 64;

/**
 * A connection that sends nothing is closed after this long, as Node's HTTP server closes one whose head does not come
 * (its headersTimeout): until its first bytes have come, no server holds the connection to time it out.
 */
const FIRST_BYTES_TIMEOUT_MS = 60_000;

/** Hop-by-hop headers belong to one connection; each request to a session is its own connection (stream). */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'upgrade']);

function headersFromRaw(raw: string[], drop: Set<string>): OutgoingHttpHeaders {
  const out: Record<string, string | string[]> = {};
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i];
    if (drop.has(name.toLowerCase())) continue;
    const prev = out[name];
    out[name] = prev === undefined ? raw[i + 1] : Array.isArray(prev) ? [...prev, raw[i + 1]] : [prev, raw[i + 1]];
  }
  return out;
}

function pick(routing: HttpRouting, req: IncomingMessage, body?: { json: unknown }): PortSubscription | undefined {
  const head = { method: req.method ?? 'GET', url: req.url ?? '/', headers: req.headers, body };
  return routing.active().find((s) => s.mode === 'steal' && s.match !== undefined && s.match(head));
}

/**
 * A port's filtered steals: the HTTP server its redirect listener hands connections to while a filtered steal is
 * active, and the forwarding (to the pod's app) of the requests no filter matches. Loaded with this module when the
 * port's first filtered steal comes: node:http (1.5 MiB of RSS, measured on its own) is never needed by a whole-port
 * steal.
 */
export class FilteredRequests {
  private readonly server: Server;
  private readonly pod = new Agent({ keepAlive: true, maxFreeSockets: POD_IDLE_CONNECTIONS });
  private readonly podTls = new HttpsAgent({ keepAlive: true, maxFreeSockets: POD_IDLE_CONNECTIONS });
  private readonly http2: FilteredStreams;
  /** HTTP/2 over the TLS the agent terminated: its own connections to the pod (TLS) and to the local commands. */
  private readonly http2Tls: FilteredStreams;
  /** Sessions told that this port speaks TLS their filter cannot read (once each). */
  private readonly toldNoCertificate = new WeakSet<IncomingTarget>();

  constructor(private readonly routing: Omit<HttpRouting, 'pod' | 'podTls'>) {
    const withPod: HttpRouting = { ...routing, pod: this.pod, podTls: this.podTls };
    this.http2 = new FilteredStreams(routing);
    this.http2Tls = new FilteredStreams(routing);
    // The HTTP server never listens: filtered connections are handed to it. Keep-alive requests are routed one by one.
    // Its head limit bounds the text each filter is matched against (shared/filter-regex.ts).
    this.server = createServer({ keepAliveTimeout: 65_000, maxHeaderSize: MAX_REQUEST_HEAD_BYTES });
    // Node's HTTP server ends a connection on the client's FIN and drops the answers still due; with httpAllowHalfOpen
    // (a property every http.Server has, set false by its constructor; not in the typings) it finishes them, then ends.
    Object.assign(this.server, { httpAllowHalfOpen: true });
    this.server.on('request', (req, res) => handleFilteredRequest(withPod, req, res));
    // An `Upgrade: h2c` offer, on any request of a connection, is declined (h2c-upgrade.ts); other upgrades are routed.
    this.server.on('upgrade', (req, socket, head) => {
      if (offersH2c(req)) declineH2cOffer(this.server, req, socket, head);
      else handleFilteredUpgrade(withPod, req, socket as Socket, head);
    });
    this.server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => {
      // A head over the limit gets the answer Node's server gives by default; anything else unparsable is cut.
      if (err.code === 'HPE_HEADER_OVERFLOW' && socket.writable)
        socket.end('HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\n\r\n');
      else socket.destroy();
    });
  }

  /**
   * Routes the requests of a connection the redirect listener accepted: its first bytes tell HTTP/2 (the client
   * preface, prior knowledge) from HTTP/1.x, and are put back for the server that takes it. A TLS ClientHello's
   * connection has its TLS ended first with the workload's certificate when a steal was given it, else goes to the pod.
   */
  take(socket: Socket): void {
    let seen: Buffer = Buffer.alloc(0);
    const stopReading = (): void => {
      socket.off('data', onData);
      socket.off('end', onEnd);
      socket.setTimeout(0);
      socket.off('timeout', onSilence);
      socket.pause();
    };
    const decide = (http2: boolean): void => {
      stopReading();
      if (seen.length > 0) socket.unshift(seen);
      if (http2) this.http2.take(socket);
      else {
        this.server.emit('connection', socket);
        // The HTTP server reads new bytes from the socket's handle itself; what was read here flows to it as 'data'.
        socket.resume();
      }
    };
    const isPreface = (): boolean => {
      const n = Math.min(seen.length, HTTP2_PREFACE.length);
      return seen.subarray(0, n).equals(HTTP2_PREFACE.subarray(0, n));
    };
    const onData = (chunk: Buffer): void => {
      seen = seen.length === 0 ? chunk : Buffer.concat([seen, chunk]);
      const hello = clientHelloKind(seen);
      if (hello === 'more') return;
      if (hello === 'tls') {
        stopReading();
        this.takeTls(socket, seen);
      } else if (isPreface()) {
        if (seen.length >= HTTP2_PREFACE.length) decide(true);
      } else decide(false);
    };
    // A client that ended with nothing, part of the preface or of a ClientHello sent no request: nothing to answer.
    const onEnd = (): void => {
      socket.off('data', onData);
      socket.end();
    };
    socket.on('data', onData);
    socket.once('end', onEnd);
    const onSilence = (): void => {
      socket.destroy();
    };
    socket.setTimeout(FIRST_BYTES_TIMEOUT_MS);
    socket.once('timeout', onSilence);
  }

  /**
   * A connection that opened with a TLS ClientHello (`seen`, read from it): with a steal's certificate its TLS is
   * ended here and the decrypted connection routed as any other (HTTP/2 when the client chose h2 by ALPN); without
   * one it goes to the pod untouched, and each filtering session hears once why its filter did not see it.
   */
  private takeTls(socket: Socket, seen: Buffer): void {
    const steals = this.routing.active().filter((s) => s.mode === 'steal' && s.match !== undefined);
    const material = steals.find((s) => s.tls)?.tls;
    if (!material) {
      for (const s of steals)
        if (!this.toldNoCertificate.has(s.session)) {
          this.toldNoCertificate.add(s.session);
          s.session.warn(noCertificateWarning(this.routing.port));
        }
      const upstream = connect({ ...originOf(socket, this.routing.port), noDelay: true });
      upstream.write(seen);
      joinBothWays(socket, upstream);
      upstream.on('error', () => socket.destroy());
      socket.on('error', () => upstream.destroy());
      socket.once('close', () => upstream.destroy());
      socket.resume();
      return;
    }
    socket.unshift(seen);
    terminateTls(
      socket,
      material,
      (plain, how) => {
        if (how.alpn === 'h2') this.http2Tls.take(plain as unknown as Socket);
        else this.server.emit('connection', plain);
      },
      (reason) => this.routing.log.debug('TLS handshake with a client failed', { port: this.routing.port, reason }),
    );
  }

  close(): void {
    this.server.close();
    this.http2.close();
    this.http2Tls.close();
    this.pod.destroy();
    this.podTls.destroy();
  }
}

/** The body a request had before it was read to be filtered: the chunks read, then the rest as it comes. */
function replayBody(chunks: Buffer[], ended: boolean, req: IncomingMessage): Readable {
  const body = new PassThrough();
  for (const chunk of chunks) body.write(chunk);
  if (ended) body.end();
  else req.pipe(body);
  return body;
}

function hasBody(req: IncomingMessage): boolean {
  const length = req.headers['content-length'];
  return (length !== undefined && length !== '0') || req.headers['transfer-encoding'] !== undefined;
}

/**
 * Reads a request's body up to MAX_FILTERED_BODY_BYTES for a body filter: whole (`ended`), or its first chunks when
 * it is longer; undefined when the client went away first (its answer is then destroyed).
 */
function readBodyPrefix(req: IncomingMessage): Promise<{ chunks: Buffer[]; ended: boolean } | undefined> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let bytes = 0;
    const finish = (result: { chunks: Buffer[]; ended: boolean } | undefined): void => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('close', onClose);
      if (result && !result.ended) req.pause();
      resolve(result);
    };
    const onData = (chunk: Buffer): void => {
      chunks.push(chunk);
      bytes += chunk.length;
      if (bytes > MAX_FILTERED_BODY_BYTES) finish({ chunks, ended: false });
    };
    const onEnd = (): void => finish({ chunks, ended: true });
    const onClose = (): void => finish(undefined);
    req.on('data', onData);
    req.once('end', onEnd);
    req.once('close', onClose);
  });
}

/**
 * A request on a filtered port. When a steal's filter reads the body, a request with one has its JSON body read first
 * (up to MAX_FILTERED_BODY_BYTES; a longer one goes to the pod, saying why), then is routed as any other.
 */
export function handleFilteredRequest(routing: HttpRouting, req: IncomingMessage, res: ServerResponse): void {
  const needsBody = routing.active().some((s) => s.mode === 'steal' && s.match?.needsBody);
  if (!needsBody || !hasBody(req)) {
    routeRequest(routing, req, res, req);
    return;
  }
  void readBodyPrefix(req).then((read) => {
    if (!read) {
      res.destroy();
      return;
    }
    const source = replayBody(read.chunks, read.ended, req);
    if (!read.ended) {
      const note = `body over ${MAX_FILTERED_BODY_BYTES / 1024} KiB: the body filter cannot read it, the pod answers`;
      routeRequest(routing, req, res, source, { toPod: true, note });
      return;
    }
    let json: { json: unknown } | undefined;
    if (isJsonContentType(req.headers['content-type']))
      try {
        json = { json: JSON.parse(Buffer.concat(read.chunks).toString('utf8')) };
      } catch {
        json = undefined; // not JSON after all: the body criterion does not match
      }
    routeRequest(routing, req, res, source, { body: json });
  });
}

function routeRequest(
  routing: HttpRouting,
  req: IncomingMessage,
  res: ServerResponse,
  source: Readable,
  decided: { body?: { json: unknown }; toPod?: boolean; note?: string } = {},
): void {
  const started = Date.now();
  const requestId = routing.nextId();
  const sub = decided.toPod ? undefined : pick(routing, req, decided.body);
  const method = req.method ?? 'GET';
  const path = req.url ?? '/';
  const to = sub ? 'local' : 'pod';
  const listeners = sub ? [sub.session] : routing.all();
  const note = decided.note ? { note: decided.note } : {};
  for (const s of listeners)
    s.traffic({ kind: 'request', requestId, port: routing.port, method, path, to, at: started, ...note });
  let bytes = 0;
  const write = res.write.bind(res);
  res.write = ((chunk: unknown, ...rest: unknown[]) => {
    if (chunk && typeof chunk !== 'function') bytes += Buffer.byteLength(chunk as Buffer);
    return (write as (...a: unknown[]) => boolean)(chunk, ...rest);
  }) as typeof res.write;
  res.once('finish', () => {
    for (const s of listeners)
      s.traffic({
        kind: 'response',
        requestId,
        port: routing.port,
        status: res.statusCode,
        durationMs: Date.now() - started,
        bytes,
        to,
        at: Date.now(),
      });
  });
  const origin = originOf(req.socket, routing.port);
  if (!sub || !sendToSession(routing, sub, req, res, source)) sendToPod(routing, origin, req, res, source);
}

/**
 * Forwards a request no session takes to the pod's app, on a kept-alive connection of the port's own, and its answer
 * back: as the app would have seen it (its Host and every end-to-end header; no X-Forwarded-*), a 502 when the app does
 * not answer.
 */
function sendToPod(
  routing: HttpRouting,
  origin: { host: string; port: number },
  req: IncomingMessage,
  res: ServerResponse,
  body: Readable,
): void {
  const options = {
    host: origin.host,
    port: origin.port,
    method: req.method,
    path: req.url,
    headers: headersFromRaw(req.rawHeaders, HOP_BY_HOP),
  };
  // A connection whose TLS the agent ended reaches the pod's own TLS listener again.
  const tls = terminatedOf(req.socket);
  const out = tls
    ? httpsRequest({ ...options, ...upstreamTls(tls), agent: routing.podTls })
    : httpRequest({ ...options, agent: routing.pod });
  out.on('response', (answer) => {
    res.writeHead(answer.statusCode ?? 502, answer.statusMessage, headersFromRaw(answer.rawHeaders, HOP_BY_HOP));
    answer.on('error', () => res.destroy());
    answer.pipe(res);
  });
  out.on('error', (err) => {
    routing.log.debug('request to the pod failed', { port: routing.port, error: err.message });
    if (!res.headersSent) {
      res.writeHead(502, { 'content-type': 'text/plain' });
      res.end('devop agent: the original app did not answer\n');
    } else res.destroy();
  });
  // A client that went away mid-answer takes the request to the app down with it (and its connection: it is not
  // reused half-read).
  res.once('close', () => {
    if (!res.writableFinished) out.destroy();
  });
  body.pipe(out);
}

/** A stream to the local command, in TLS again when the client's connection was (the command serves the same). */
function towardsLocal(stream: IncomingStream, client: Socket): Socket {
  const tls = terminatedOf(client);
  return tls ? encryptTowardsLocal(stream, tls) : (stream as unknown as Socket);
}

/** Sends one request to the session over a stream of its own and copies the local command's answer back. */
function sendToSession(
  routing: HttpRouting,
  sub: PortSubscription,
  req: IncomingMessage,
  res: ServerResponse,
  body: Readable,
): boolean {
  let stream: IncomingStream;
  try {
    stream = sub.session.openIncoming({
      kind: 'incoming',
      port: routing.port,
      mode: 'steal',
      remoteAddress: req.socket.remoteAddress ?? '',
      remotePort: req.socket.remotePort ?? 0,
      subscriptionId: sub.id,
      request: {
        method: req.method ?? 'GET',
        path: req.url ?? '/',
        headers: req.headers as Record<string, string | string[]>,
      },
    });
  } catch {
    return false;
  }
  stream.on('error', () => undefined); // a reset after the answer is complete is not an error for the client
  const out = httpRequest({
    method: req.method,
    path: req.url,
    headers: { ...headersFromRaw(req.rawHeaders, HOP_BY_HOP), connection: 'close' },
    createConnection: () => towardsLocal(stream, req.socket),
  });
  out.on('response', (answer) => {
    res.writeHead(answer.statusCode ?? 502, answer.statusMessage, headersFromRaw(answer.rawHeaders, HOP_BY_HOP));
    answer.pipe(res);
    answer.once('end', () => stream.end());
  });
  out.on('error', (err) => {
    routing.log.debug('request to session failed', { port: routing.port, error: err.message });
    if (!res.headersSent) {
      res.writeHead(502, { 'content-type': 'text/plain' });
      res.end('devop agent: the local command did not answer\n');
    } else res.destroy();
  });
  res.once('close', () => {
    if (!res.writableFinished) resetStream(stream, 'client went away');
  });
  body.pipe(out);
  return true;
}

/**
 * WebSocket (or other Upgrade) requests: matched ones become a raw two-way stream to the session, others go to the pod.
 */
export function handleFilteredUpgrade(routing: HttpRouting, req: IncomingMessage, socket: Socket, head: Buffer): void {
  const sub = pick(routing, req);
  const origin = originOf(socket, routing.port);
  if (sub) {
    try {
      const stream = sub.session.openIncoming({
        kind: 'incoming',
        port: routing.port,
        mode: 'steal',
        remoteAddress: socket.remoteAddress ?? '',
        remotePort: socket.remotePort ?? 0,
        subscriptionId: sub.id,
        request: {
          method: req.method ?? 'GET',
          path: req.url ?? '/',
          headers: req.headers as Record<string, string | string[]>,
        },
      });
      const local = towardsLocal(stream, socket);
      local.write(requestHead(req, head));
      joinBothWays(socket, local);
      socket.on('error', () => resetStream(stream, 'client connection error'));
      local.on('error', () => socket.destroy());
      if (local !== (stream as unknown)) stream.on('error', () => socket.destroy());
      return;
    } catch {
      // the session's tunnel is down: the pod answers
    }
  }
  // To the pod: the same head on a connection of its own, then bytes both ways (the app's 101 answer among them).
  const tls = terminatedOf(socket);
  const upstream = tls
    ? encryptTowardsPod(origin, tls)
    : connect({ host: origin.host, port: origin.port, noDelay: true });
  upstream.write(requestHead(req, head));
  joinBothWays(socket, upstream);
  upstream.on('error', () => socket.destroy());
  socket.on('error', () => upstream.destroy());
  socket.once('close', () => upstream.destroy());
}
