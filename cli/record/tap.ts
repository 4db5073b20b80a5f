// Recording a stolen connection (`devop exec --record`): devop reads the HTTP/1.1 exchanges on it (HTTP/2 without TLS:
// tap-h2.ts) — ending the client's TLS with a session certificate when it speaks TLS, and opening its own TLS to the
// local command — passes each request on to the local command, and adds request, answer, timing and pod to the HAR.
// Bytes that are neither TLS nor HTTP are left alone (the caller splices them as without --record).
import {
  Agent as HttpAgent,
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type OutgoingHttpHeaders,
  type ServerResponse,
} from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { connect as netConnect, type Socket } from 'node:net';
import { duplexPair, type Duplex } from 'node:stream';
import { connect as tlsConnect, createSecureContext, TLSSocket } from 'node:tls';
import { BodyTap, harBody, harHeaders, queryString, type HarRecorder } from './har.js';
import { HTTP2_PREFACE, recordHttp2, type RecordedConnection } from './tap-h2.js';
import { makeSessionCert } from '../process/session-cert.js';

export type { RecordedConnection } from './tap-h2.js';

/** Hop-by-hop headers belong to one connection (RFC 9110 §7.6.1); devop's to the local command has its own. */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'upgrade', 'te', 'trailer']);

/** The first byte of a TLS handshake record. */
const TLS_HANDSHAKE = 0x16;
/** An HTTP/1.x request line starts with a method token (upper-case letters) and a space. */
const HTTP_REQUEST_LINE = /^[A-Z]{3,10} /;

/**
 * The protocol devop speaks with a TLS client it records: HTTP/1.1 whenever the client offers it (the local command may
 * speak nothing else), h2 only to a client that offers h2 alone (the agent's TLS towards the local command under
 * --tls-secret, after its client chose h2); nothing else (the handshake then fails, as the client asked).
 */
export function chooseAlpn(protocols: readonly string[]): string | undefined {
  if (protocols.includes('http/1.1')) return 'http/1.1';
  return protocols.includes('h2') ? 'h2' : undefined;
}

/** What the first bytes of a connection say it carries: `h2c` for HTTP/2's preface (its `PRI *` is no request). */
export function sniff(first: Buffer): 'tls' | 'http' | 'h2c' | 'other' {
  if (first[0] === TLS_HANDSHAKE) return 'tls';
  const n = Math.min(first.length, HTTP2_PREFACE.length);
  if (n >= 4 && first.subarray(0, n).equals(HTTP2_PREFACE.subarray(0, n))) return 'h2c';
  return HTTP_REQUEST_LINE.test(first.subarray(0, 12).toString('latin1')) ? 'http' : 'other';
}

function forwardHeaders(raw: readonly string[]): OutgoingHttpHeaders {
  const out: Record<string, string | string[]> = {};
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i];
    if (HOP_BY_HOP.has(name.toLowerCase())) continue;
    const prev = out[name];
    out[name] = prev === undefined ? raw[i + 1] : Array.isArray(prev) ? [...prev, raw[i + 1]] : [prev, raw[i + 1]];
  }
  return out;
}

function answerHeaders(raw: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) if (!HOP_BY_HOP.has(raw[i].toLowerCase())) out.push(raw[i], raw[i + 1]);
  return out;
}

function mimeOf(headers: IncomingMessage['headers']): string {
  return headers['content-type'] ?? '';
}

interface ConnectionState extends RecordedConnection {
  tls: boolean;
  agent: HttpAgent;
}

/** One per session: the HTTP server that reads the recorded connections, and the certificate it presents. */
export class ExchangeRecorder {
  private readonly server = createServer({ keepAliveTimeout: 60_000 }, (req, res) => this.exchange(req, res));
  private readonly connections = new WeakMap<Duplex, ConnectionState>();
  private secureContext: ReturnType<typeof createSecureContext> | undefined;

  constructor(
    private readonly har: HarRecorder,
    private readonly onError: (message: string) => void = () => undefined,
  ) {
    this.server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => this.upgrade(req, socket, head));
  }

  /**
   * Reads the connection's first bytes: TLS or HTTP is recorded (true); anything else is handed back unread (false),
   * for the caller to splice as usual.
   */
  async take(stream: Duplex, conn: RecordedConnection): Promise<boolean> {
    const first = await firstChunk(stream);
    if (first === undefined) return false;
    stream.unshift(first);
    const kind = sniff(first);
    if (kind === 'other') return false;
    if (kind === 'h2c') {
      recordHttp2(stream, conn, this.har, this.onError);
      return true;
    }
    if (kind === 'http') {
      this.serveHttp1(stream, conn, false);
      return true;
    }
    this.secureContext ??= createSecureContext(makeSessionCert('devop --record'));
    const socket = new TLSSocket(stream, {
      isServer: true,
      secureContext: this.secureContext,
      ALPNCallback: ({ protocols }) => chooseAlpn(protocols),
    });
    socket.on('error', (err) =>
      this.onError(
        `--record: TLS with a client of port ${conn.port} failed (${err.message}); a client that checks the ` +
          "server's certificate refuses the one devop shows while recording: drop --record, or let the client " +
          'skip verification',
      ),
    );
    socket.once('secure', () => {
      if (socket.alpnProtocol === 'h2') {
        // Node's HTTP/2 server does not take a TLSSocket over a JS stream as its connection; a plain duplex it does.
        const [inner, outer] = duplexPair();
        socket.pipe(outer).pipe(socket);
        outer.on('error', () => socket.destroy());
        socket.once('close', () => outer.destroy());
        recordHttp2(inner, conn, this.har, this.onError, true);
      } else this.serveHttp1(socket, conn, true);
    });
    return true;
  }

  private serveHttp1(socket: Duplex, conn: RecordedConnection, tls: boolean): void {
    const agent = tls
      ? new HttpsAgent({ keepAlive: true, maxSockets: 1, rejectUnauthorized: false })
      : new HttpAgent({ keepAlive: true, maxSockets: 1 });
    socket.once('close', () => agent.destroy());
    this.connections.set(socket, { ...conn, tls, agent });
    this.server.emit('connection', socket);
  }

  private exchange(req: IncomingMessage, res: ServerResponse): void {
    const conn = this.connections.get(req.socket as Duplex);
    if (!conn) {
      res.writeHead(500).end();
      return;
    }
    const started = Date.now();
    const requestBody = new BodyTap();
    let sent = started;
    req.on('data', (chunk: Buffer) => requestBody.add(chunk));
    req.once('end', () => (sent = Date.now()));
    const send = conn.tls ? httpsRequest : httpRequest;
    const upstream = send({
      host: '127.0.0.1',
      port: conn.localPort,
      method: req.method,
      path: req.url,
      headers: forwardHeaders(req.rawHeaders),
      agent: conn.agent,
    });
    const record = (answer: {
      status: number;
      statusText: string;
      httpVersion: string;
      rawHeaders: string[];
      mimeType: string;
      body: BodyTap;
      waited: number;
    }): void => {
      const ended = Date.now();
      // HAR's `time` is the sum of the timings; an answer may start before the request has been sent whole.
      const timings = { send: sent - started, wait: Math.max(0, answer.waited - sent), receive: ended - answer.waited };
      const url = requestUrl(req, conn);
      const requestMime = mimeOf(req.headers);
      const postBody = requestBody.size > 0 ? harBody(requestBody.bytes(), requestBody.size, requestMime) : undefined;
      const content = harBody(answer.body.bytes(), answer.body.size, answer.mimeType);
      this.har.add({
        startedDateTime: new Date(started).toISOString(),
        time: timings.send + timings.wait + timings.receive,
        request: {
          method: req.method ?? 'GET',
          url: url.href,
          httpVersion: `HTTP/${req.httpVersion}`,
          cookies: [],
          headers: harHeaders(req.rawHeaders),
          queryString: queryString(url),
          ...(postBody
            ? {
                postData: {
                  mimeType: postBody.mimeType,
                  text: postBody.text,
                  ...(postBody.encoding ? { _encoding: postBody.encoding } : {}),
                  ...(postBody._cut ? { _cut: true } : {}),
                },
              }
            : {}),
          headersSize: -1,
          bodySize: requestBody.size,
        },
        response: {
          status: answer.status,
          statusText: answer.statusText,
          httpVersion: answer.httpVersion,
          cookies: [],
          headers: harHeaders(answer.rawHeaders),
          content,
          redirectURL: '',
          headersSize: -1,
          bodySize: answer.body.size,
        },
        cache: {},
        timings: {
          blocked: -1,
          dns: -1,
          connect: -1,
          ssl: -1,
          ...timings,
        },
        ...(conn.pod ? { _pod: conn.pod } : {}),
        _port: conn.port,
        _localPort: conn.localPort,
      });
    };
    upstream.on('response', (up) => {
      const waited = Date.now();
      const body = new BodyTap();
      res.writeHead(up.statusCode ?? 502, up.statusMessage, answerHeaders(up.rawHeaders));
      up.on('data', (chunk: Buffer) => body.add(chunk));
      up.once('end', () =>
        record({
          status: up.statusCode ?? 502,
          statusText: up.statusMessage ?? '',
          httpVersion: `HTTP/${up.httpVersion}`,
          rawHeaders: up.rawHeaders,
          mimeType: mimeOf(up.headers),
          body,
          waited,
        }),
      );
      up.pipe(res);
    });
    upstream.on('error', (err: NodeJS.ErrnoException) => {
      this.onError(
        `--record: the local command on 127.0.0.1:${conn.localPort} did not answer: ${err.code ?? err.message}`,
      );
      if (res.headersSent) {
        res.destroy();
        return;
      }
      const text = `devop: the local command did not answer (${err.code ?? err.message})\n`;
      res.writeHead(502, { 'content-type': 'text/plain' }).end(text);
      const body = new BodyTap();
      body.add(Buffer.from(text));
      const now = Date.now();
      record({
        status: 502,
        statusText: 'Bad Gateway',
        httpVersion: 'HTTP/1.1',
        rawHeaders: [],
        mimeType: 'text/plain',
        body,
        waited: now,
      });
    });
    req.pipe(upstream);
  }

  /** An upgrade (WebSocket, SPDY) is passed through unrecorded: it is no longer one request and one answer. */
  private upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const conn = this.connections.get(socket);
    if (!conn) return void socket.destroy();
    const local: Socket = conn.tls
      ? tlsConnect({ host: '127.0.0.1', port: conn.localPort, rejectUnauthorized: false })
      : netConnect({ host: '127.0.0.1', port: conn.localPort });
    local.on('error', () => socket.destroy());
    socket.on('error', () => local.destroy());
    const lines = [`${req.method} ${req.url} HTTP/${req.httpVersion}`];
    for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
    local.write(`${lines.join('\r\n')}\r\n\r\n`);
    if (head.length > 0) local.write(head);
    socket.pipe(local).pipe(socket);
  }
}

/** The URL a HAR gives a request: the Host the client named, else the pod's port; a Host that is no host is not. */
function requestUrl(req: IncomingMessage, conn: ConnectionState): URL {
  const scheme = conn.tls ? 'https' : 'http';
  const path = req.url ?? '/';
  try {
    return new URL(path, `${scheme}://${req.headers.host ?? `127.0.0.1:${conn.port}`}`);
  } catch {
    // A malformed Host header (or request target): the local command got it as sent; the HAR names the pod's port.
    return new URL(`${scheme}://127.0.0.1:${conn.port}/${encodeURIComponent(path)}`);
  }
}

/**
 * The first chunk a stream carries, or undefined when it ends (or fails) first. Read with 'readable', not 'data': once
 * the listener is gone the stream is neither flowing nor paused, so whoever reads it next starts it as usual.
 */
function firstChunk(stream: Duplex): Promise<Buffer | undefined> {
  return new Promise((resolve) => {
    const onReadable = (): void => {
      const chunk = stream.read() as Buffer | null;
      if (chunk === null) return;
      done();
      resolve(chunk);
    };
    const onEnd = (): void => {
      done();
      resolve(undefined);
    };
    const done = (): void => {
      stream.off('readable', onReadable);
      stream.off('end', onEnd);
      stream.off('error', onEnd);
      stream.off('close', onEnd);
    };
    stream.on('readable', onReadable);
    stream.once('end', onEnd);
    stream.once('error', onEnd);
    stream.once('close', onEnd);
  });
}
