// Filtered mirrors: a mirrored connection's client bytes are parsed passively (Node's own HTTP/1.x parser, or its
// http2 server for h2c prior knowledge), each request is matched by the same matcher filtered steals use, and each
// matching one goes to its session as a copy of its own (an `incoming` mirror stream); the answers are discarded.
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import {
  connect as connectHttp2,
  createServer as createHttp2Server,
  type ClientHttp2Session,
  type IncomingHttpHeaders as Http2Headers,
  type ServerHttp2Session,
  type ServerHttp2Stream,
} from 'node:http2';
import { Duplex } from 'node:stream';
import { isJsonContentType, MAX_FILTERED_BODY_BYTES } from '../../shared/body-filter.js';
import type { AgentLog } from '../log.js';
import { HTTP2_PREFACE } from './http2-filter.js';
import { declineH2cOffer, offersH2c } from './h2c-upgrade.js';
import { MIRROR_BUFFER_LIMIT, MirrorCopy } from './mirror-copy.js';
import type { IncomingStream, PortSubscription, RequestHead } from './subscription.js';

/** The largest window HTTP/2 allows (RFC 9113 §6.9.1): the passive parser never refuses what the pod accepted. */
const MAX_WINDOW = 2 ** 31 - 1;
/** Connection-specific headers are not allowed in HTTP/2 (RFC 9113 §8.2.2). */
const NOT_FORWARDED = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade']);
/** How long a closed connection's parser may take to read the bytes it still holds. */
const PARSE_REST_MS = 5000;
/** Why a request with a body over the bound is not copied, in its request event's line. */
const OVER_BOUND = `body over ${MAX_FILTERED_BODY_BYTES / 1024} KiB: the body filter cannot read it`;
/** An HTTP/1.x request starts with a method token and a space (RFC 9112 §3). */
const REQUEST_LINE_START = /^[A-Z]{1,20} /;

interface Origin {
  port: number;
  connId: string;
  remote: { address: string; port: number };
  log: AgentLog;
}

/** The request's body for the body filter: its JSON when its content-type says JSON and it parses, else undefined. */
function jsonBody(contentType: string | undefined, chunks: Buffer[]): { json: unknown } | undefined {
  if (!isJsonContentType(contentType)) return undefined;
  try {
    return { json: JSON.parse(Buffer.concat(chunks).toString('utf8')) };
  } catch {
    return undefined; // not JSON after all: the body filter does not match
  }
}

/** A stream that swallows what is written to it and gives what is pushed: the passive parser's socket. */
function passiveSocket(): Duplex {
  return new Duplex({
    read() {
      // the bytes are pushed as the capture (or the agent's forward) delivers them
    },
    write(_chunk, _encoding, done) {
      done();
    },
  });
}

/** The copies of one filtered-mirror connection: its protocol is told from its first bytes. */
export class MirroredRequests {
  private socket: Duplex | undefined;
  private head = Buffer.alloc(0);
  private stopped = false;
  private nextRequest = 0;
  /** Per session: the h2c connection to its local command that this connection's copied streams use. */
  private readonly h2 = new Map<PortSubscription, ClientHttp2Session>();

  constructor(
    private readonly subs: PortSubscription[],
    private readonly origin: Origin,
  ) {}

  push(chunk: Buffer): void {
    if (this.stopped) return;
    if (this.socket) {
      if (this.socket.readableLength + chunk.length > MIRROR_BUFFER_LIMIT) {
        this.stop('the agent did not keep up with its requests');
        return;
      }
      this.socket.push(chunk);
      return;
    }
    this.head = Buffer.concat([this.head, chunk]);
    const known = Math.min(this.head.length, HTTP2_PREFACE.length);
    if (this.head.subarray(0, known).equals(HTTP2_PREFACE.subarray(0, known))) {
      if (this.head.length >= HTTP2_PREFACE.length) this.start(this.http2());
      return;
    }
    if (REQUEST_LINE_START.test(this.head.subarray(0, 21).toString('latin1'))) this.start(this.http1());
    else if (this.head.length >= 21 || !/^[A-Z]*$/.test(this.head.toString('latin1')))
      this.stop('its bytes are not HTTP, so the filter cannot read them');
  }

  /** The client finished sending. */
  end(): void {
    if (!this.stopped && this.socket && !this.socket.readableEnded) this.socket.push(null);
  }

  /** The connection is over: the parser reads what it was given (a few seconds at most), then everything closes. */
  finish(): void {
    this.end();
    const socket = this.socket;
    if (!socket || this.stopped || socket.readableEnded || socket.destroyed) {
      this.close();
      return;
    }
    const timer = setTimeout(() => this.close(), PARSE_REST_MS);
    timer.unref();
    socket.once('end', () => {
      clearTimeout(timer);
      setImmediate(() => this.close());
    });
    socket.once('close', () => {
      clearTimeout(timer);
      this.close();
    });
  }

  /** Bytes are missing, or the connection is over: nothing more is parsed, open copies end as they are. */
  close(): void {
    this.stopped = true;
    this.socket?.destroy();
    for (const session of this.h2.values()) session.close();
  }

  private start(socket: Duplex): void {
    this.socket = socket;
    socket.push(this.head);
    this.head = Buffer.alloc(0);
  }

  /** Stops copying this connection; each session gets one line saying why. */
  private stop(why: string): void {
    if (this.stopped) return;
    this.close();
    const { port, connId, log } = this.origin;
    for (const sub of this.subs)
      sub.session.warn(`mirror of :${port}: connection ${connId} is not copied: ${why}; the pod was not affected`);
    log.warn('filtered mirror stopped', { port, connId, why });
  }

  /**
   * Tells each session of the request (a copy to its command, or not matched) and returns the matching sessions;
   * `undecided`: why no filter could decide it (a body over the bound), so nothing is copied and each line says why.
   */
  private decide(head: RequestHead, undecided?: string): { id: string; matched: PortSubscription[] } {
    const id = `${this.origin.connId}-r${++this.nextRequest}`;
    const matched: PortSubscription[] = [];
    for (const sub of this.subs) {
      const match = undecided === undefined && (sub.match?.(head) ?? true);
      if (match) matched.push(sub);
      sub.session.traffic({
        kind: 'request',
        requestId: id,
        port: this.origin.port,
        method: head.method,
        path: head.url,
        to: match ? 'local' : 'pod',
        mirror: true,
        at: Date.now(),
        ...(undecided ? { note: undecided } : {}),
      });
    }
    return { id, matched };
  }

  /** A copy of its own for one request, bounded as a connection's copy is (MirrorCopy). */
  private openCopy(sub: PortSubscription, id: string, answers = false): MirrorCopy | undefined {
    const { port, remote, log } = this.origin;
    let stream: IncomingStream;
    try {
      stream = sub.session.openIncoming({
        kind: 'incoming',
        port,
        mode: 'mirror',
        remoteAddress: remote.address,
        remotePort: remote.port,
        subscriptionId: sub.id,
        ...(answers ? { answers } : {}),
      });
    } catch {
      return undefined; // that session's tunnel just went
    }
    stream.on('error', () => undefined);
    if (!answers) stream.resume(); // the local command's answer to a copy is dropped (HTTP/2: read by its client)
    return new MirrorCopy(stream, (why) => {
      sub.session.warn(`mirror of :${port}: copy of request ${id} dropped (${why}); the pod was not affected`);
      log.warn('mirror copy dropped', { port, request: id, session: sub.session.sessionId, why });
    });
  }

  private http1(): Duplex {
    const server = createHttpServer({ requestTimeout: 0, headersTimeout: 0, keepAliveTimeout: 0 });
    server.on('request', (req: IncomingMessage, res: ServerResponse) => this.http1Request(req, res));
    let offeredH2c = false;
    server.on('clientError', (_err, socket: Duplex) => {
      // A mirror cannot decline for the pod: its app may have taken an h2c offer, and the client goes on in HTTP/2.
      this.stop(
        offeredH2c
          ? 'it was upgraded to h2c, the pod accepting the offer: upgraded connections are not copied'
          : 'its bytes stopped being HTTP/1.x',
      );
      socket.destroy();
    });
    // An h2c offer is declined here as on a filtered steal (h2c-upgrade.ts): its request is parsed again without it,
    // and copied when it matches. Any other upgraded connection (WebSocket, …) carries other bytes from here on: not
    // copied further, and each session is told so (its request is handed over here, not as a request to copy).
    server.on('upgrade', (req: IncomingMessage, socket: Duplex, after: Buffer) => {
      if (offersH2c(req)) {
        offeredH2c = true;
        declineH2cOffer(server, req, socket, after);
        return;
      }
      const to = String(req.headers.upgrade ?? 'another protocol');
      this.stop(`it was upgraded to ${to} (${req.method} ${req.url}): upgraded connections are not copied`);
      socket.destroy();
    });
    const socket = passiveSocket();
    server.emit('connection', socket);
    return socket;
  }

  private http1Request(req: IncomingMessage, res: ServerResponse): void {
    // Its answer goes nowhere; ending it once the request is read lets the parser go on to the next one.
    req.once('end', () => res.end());
    const head: RequestHead = { method: req.method ?? 'GET', url: req.url ?? '/', headers: req.headers };
    const chunked = /chunked/i.test(String(req.headers['transfer-encoding'] ?? ''));
    const lines = [`${head.method} ${head.url} HTTP/${req.httpVersion}`];
    for (let i = 0; i < req.rawHeaders.length; i += 2) {
      const name = req.rawHeaders[i].toLowerCase();
      if (name !== 'connection' && name !== 'keep-alive') lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
    }
    // Each copy is a connection of its own: the local command closes it after its answer.
    lines.push('Connection: close', '', '');
    const frame = (chunk: Buffer): Buffer[] =>
      chunked ? [Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from('\r\n')] : [chunk];
    const send = (matched: PortSubscription[], id: string, body: Buffer[], ended: boolean): void => {
      const copies = matched.flatMap((sub) => this.openCopy(sub, id) ?? []);
      if (copies.length === 0) {
        req.resume();
        return;
      }
      const push = (chunk: Buffer): void => {
        for (const piece of frame(chunk)) for (const copy of copies) copy.push(piece);
      };
      for (const copy of copies) copy.push(Buffer.from(lines.join('\r\n'), 'latin1'));
      for (const chunk of body) push(chunk);
      const finish = (): void => {
        if (chunked) for (const copy of copies) copy.push(Buffer.from('0\r\n\r\n'));
        for (const copy of copies) copy.end();
      };
      if (ended) {
        finish();
        return;
      }
      req.on('data', push);
      req.once('end', finish);
      req.once('aborted', () => {
        for (const copy of copies) copy.reset('client connection ended mid-request');
      });
    };
    if (!this.subs.some((s) => s.match?.needsBody)) {
      const { id, matched } = this.decide(head);
      send(matched, id, [], false);
      return;
    }
    // A body filter reads the body first (up to the bound filtered steals use); a longer one is not copied.
    const body: Buffer[] = [];
    let bytes = 0;
    const onData = (chunk: Buffer): void => {
      bytes += chunk.length;
      if (bytes <= MAX_FILTERED_BODY_BYTES) body.push(chunk);
    };
    req.on('data', onData);
    req.once('end', () => {
      if (bytes > MAX_FILTERED_BODY_BYTES) {
        this.decide(head, OVER_BOUND);
        return;
      }
      head.body = jsonBody(req.headers['content-type'], body);
      const { id, matched } = this.decide(head);
      send(matched, id, body, true);
    });
  }

  private http2(): Duplex {
    const server = createHttp2Server({ settings: { initialWindowSize: MAX_WINDOW, enablePush: false } });
    // Its SETTINGS are acknowledged by the client's ACK of the pod's own; its windows exceed any the pod grants.
    server.on('session', (session: ServerHttp2Session) => {
      session.setLocalWindowSize(MAX_WINDOW);
      session.on('error', () => this.stop('its bytes stopped being HTTP/2'));
    });
    server.on('stream', (stream: ServerHttp2Stream, headers: Http2Headers) => this.http2Stream(stream, headers));
    const socket = passiveSocket();
    server.emit('connection', socket);
    return socket;
  }

  /**
   * A stream of the client's connection. When a filter reads the body, a stream with a JSON content-type is decided
   * once its body is read (up to MAX_FILTERED_BODY_BYTES, as filtered steals do; a longer one is not copied) and its
   * copy carries the body whole; any other stream is decided by its headers at once (the body filter does not match
   * it), and its copy follows its DATA as it comes.
   */
  private http2Stream(stream: ServerHttp2Stream, headers: Http2Headers): void {
    stream.on('error', () => undefined);
    // Its answer goes nowhere (the pod answers the client).
    stream.once('end', () => {
      if (!stream.destroyed && !stream.headersSent) stream.respond({ ':status': 204 }, { endStream: true });
    });
    const head: RequestHead = {
      method: String(headers[':method'] ?? 'GET'),
      url: String(headers[':path'] ?? '/'),
      headers,
    };
    const needsBody = this.subs.some((s) => s.match?.needsBody);
    if (!needsBody || stream.endAfterHeaders || !isJsonContentType(String(headers['content-type'] ?? ''))) {
      const { id, matched } = this.decide(head);
      this.copyStream(stream, headers, id, matched);
      return;
    }
    const body: Buffer[] = [];
    let bytes = 0;
    let over = false;
    // The passive parser reads on past the bound (the pod took those bytes): they are dropped, not held.
    stream.on('data', (chunk: Buffer) => {
      if (over) return;
      bytes += chunk.length;
      if (bytes <= MAX_FILTERED_BODY_BYTES) {
        body.push(chunk);
        return;
      }
      over = true;
      body.length = 0;
      this.decide(head, OVER_BOUND);
    });
    stream.once('end', () => {
      if (over) return;
      head.body = jsonBody(String(headers['content-type']), body);
      const { id, matched } = this.decide(head);
      this.copyStream(stream, headers, id, matched, body);
    });
  }

  /**
   * Copies a stream to each matching session's local command: `read`, its whole body already read for a body filter,
   * or else its DATA as the parser reads it.
   */
  private copyStream(
    stream: ServerHttp2Stream,
    headers: Http2Headers,
    id: string,
    matched: PortSubscription[],
    read?: Buffer[],
  ): void {
    const out: Record<string, string | string[]> = {};
    for (const [name, value] of Object.entries(headers))
      if (value !== undefined && !NOT_FORWARDED.has(name)) out[name] = value;
    const bodyless = read ? read.every((chunk) => chunk.length === 0) : stream.endAfterHeaders;
    const copies = matched.flatMap((sub) => {
      const session = this.h2Session(sub);
      if (!session) return [];
      const copy = session.request(out, { endStream: bodyless });
      copy.on('error', () => undefined);
      copy.resume(); // the local command's answer is dropped
      return [copy];
    });
    if (read) {
      if (!bodyless)
        for (const copy of copies) {
          for (const chunk of read) copy.write(chunk);
          copy.end();
        }
      return;
    }
    stream.on('data', (chunk: Buffer) => {
      for (const copy of copies) {
        if (copy.writableLength + chunk.length > MIRROR_BUFFER_LIMIT) {
          this.dropStream(copy, id, 'the tunnel did not keep up');
          continue;
        }
        if (!copy.destroyed) copy.write(chunk);
      }
    });
    stream.once('end', () => {
      for (const copy of copies) if (!copy.destroyed && !copy.writableEnded) copy.end();
    });
    stream.once('aborted', () => {
      for (const copy of copies) copy.close();
    });
  }

  private dropStream(copy: ReturnType<ClientHttp2Session['request']>, id: string, why: string): void {
    if (copy.destroyed) return;
    copy.close();
    const { port, log } = this.origin;
    for (const [sub, session] of this.h2)
      if (session === copy.session)
        sub.session.warn(`mirror of :${port}: copy of request ${id} dropped (${why}); the pod was not affected`);
    log.warn('mirror copy dropped', { port, request: id, why });
  }

  /**
   * The session's h2c connection for this connection's copies: an incoming mirror stream that carries the local
   * command's answers back (its SETTINGS and WINDOW_UPDATEs), which the HTTP/2 client reads and drops.
   */
  private h2Session(sub: PortSubscription): ClientHttp2Session | undefined {
    const existing = this.h2.get(sub);
    if (existing && !existing.destroyed) return existing;
    const copy = this.openCopy(sub, `${this.origin.connId}-h2`, true);
    if (!copy) return undefined;
    const session = connectHttp2('http://localhost', {
      createConnection: () => copy.stream,
      settings: { enablePush: false },
    });
    session.on('error', () => undefined);
    this.h2.set(sub, session);
    return session;
  }
}
