// Recording a stolen HTTP/2 connection (h2c, the way the agent hands a filtered port's matched streams to the session;
// or h2 in TLS devop ended, as the agent re-encrypts them under --tls-secret): devop ends the client's HTTP/2
// connection, passes each stream on to the local command over one HTTP/2 connection of its own (headers, body,
// trailers, resets), and adds each exchange to the HAR as `HTTP/2`, a gRPC call's trailers (grpc-status, grpc-message)
// in the response's `_trailers`.
import {
  connect as connectHttp2,
  constants,
  createServer,
  type ClientHttp2Session,
  type IncomingHttpHeaders,
  type OutgoingHttpHeaders,
  type ServerHttp2Stream,
} from 'node:http2';
import type { Duplex } from 'node:stream';
import { BodyTap, harBody, queryString, type HarHeader, type HarRecorder } from './har.js';

/** Where a recorded connection came from and goes to. */
export interface RecordedConnection {
  /** The pod port it was stolen from. */
  port: number;
  localPort: number;
  pod?: string;
}

/** What every HTTP/2 connection starts with (RFC 9113 §3.4). */
export const HTTP2_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');

/** Connection-specific headers are not allowed in HTTP/2 (RFC 9113 §8.2.2). */
const NOT_FORWARDED = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade']);
/** No server push: a pushed stream would be no request of the client's. */
const NO_PUSH = { settings: { enablePush: false } };

function forwardable(headers: IncomingHttpHeaders, keepPseudo: boolean): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(headers))
    if (value !== undefined && !NOT_FORWARDED.has(name) && (keepPseudo || !name.startsWith(':'))) out[name] = value;
  return out;
}

/** HTTP/2 headers as HAR headers: pseudo-headers left out (method, URL and status carry them). */
export function harHeadersOf(headers: IncomingHttpHeaders): HarHeader[] {
  const out: HarHeader[] = [];
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || name.startsWith(':')) continue;
    for (const one of Array.isArray(value) ? value : [value]) out.push({ name, value: String(one) });
  }
  return out;
}

/** The request's URL as the client named it (`:authority`, `:path`), else the pod's port. */
function requestUrl(headers: IncomingHttpHeaders, conn: RecordedConnection, tls: boolean): URL {
  const scheme = tls ? 'https' : 'http';
  const path = String(headers[':path'] ?? '/');
  const authority = String(headers[':authority'] ?? headers.host ?? `127.0.0.1:${conn.port}`);
  try {
    return new URL(path, `${scheme}://${authority}`);
  } catch {
    return new URL(`${scheme}://127.0.0.1:${conn.port}/${encodeURIComponent(path)}`);
  }
}

/**
 * Records one stolen HTTP/2 connection (h2c, or h2 in the TLS devop ended: `tls`): its streams reach the local command
 * over one HTTP/2 connection of devop's, in TLS again when the client's was (any certificate: it is the process devop
 * started, on loopback).
 */
export function recordHttp2(
  stream: Duplex,
  conn: RecordedConnection,
  har: HarRecorder,
  onError: (message: string) => void,
  tls = false,
): void {
  const server = createServer(NO_PUSH);
  let local: ClientHttp2Session | undefined;
  const toLocal = (): ClientHttp2Session => {
    if (local && !local.closed && !local.destroyed) return local;
    local = tls
      ? connectHttp2(`https://127.0.0.1:${conn.localPort}`, { ...NO_PUSH, rejectUnauthorized: false })
      : connectHttp2(`http://127.0.0.1:${conn.localPort}`, NO_PUSH);
    local.on('error', (err: NodeJS.ErrnoException) =>
      onError(`--record: the local command on 127.0.0.1:${conn.localPort} did not answer: ${err.code ?? err.message}`),
    );
    return local;
  };
  server.on('session', (session) => {
    session.on('error', () => undefined); // the client's connection going is not the recording's problem
    session.once('close', () => local?.close());
  });
  server.on('stream', (from, headers) => exchange(from, headers, toLocal(), { ...conn, tls }, har));
  server.emit('connection', stream);
}

function exchange(
  from: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
  local: ClientHttp2Session,
  conn: RecordedConnection & { tls: boolean },
  har: HarRecorder,
): void {
  const started = Date.now();
  let sent = from.endAfterHeaders ? started : 0;
  let waited = 0;
  let answer: IncomingHttpHeaders | undefined;
  let trailers: IncomingHttpHeaders = {};
  const requestBody = new BodyTap();
  const answerBody = new BodyTap();
  const out = local.request(forwardable(headers, true), { endStream: from.endAfterHeaders });
  from.on('data', (chunk: Buffer) => requestBody.add(chunk));
  from.once('end', () => {
    sent = Date.now();
  });
  from.on('error', () => undefined); // its close carries what happened
  out.on('trailers', (t) => {
    trailers = t;
  });
  out.on('response', (h, flags) => {
    waited = Date.now();
    answer = h;
    if (from.destroyed) return;
    // A trailers-only answer (gRPC failing a call at once) stays one HEADERS frame.
    if (flags & constants.NGHTTP2_FLAG_END_STREAM) {
      from.respond(forwardable(h, true), { endStream: true });
      return;
    }
    from.respond(forwardable(h, true), { waitForTrailers: true });
    from.once('wantTrailers', () => from.sendTrailers(forwardable(trailers, false)));
    out.on('data', (chunk: Buffer) => answerBody.add(chunk));
    out.pipe(from);
  });
  out.on('error', (err: NodeJS.ErrnoException) => {
    if (from.destroyed || from.headersSent) return void from.close(constants.NGHTTP2_INTERNAL_ERROR);
    const text = `devop: the local command did not answer (${err.code ?? err.message})\n`;
    from.respond({ ':status': 502, 'content-type': 'text/plain' });
    from.end(text);
    answer = { ':status': '502', 'content-type': 'text/plain' };
    answerBody.add(Buffer.from(text));
    waited = Date.now();
  });
  // A reset from the local command reaches the client with its code, and one from the client reaches the command.
  out.once('close', () => {
    if (out.rstCode && out.rstCode !== constants.NGHTTP2_NO_ERROR && !from.destroyed) from.close(out.rstCode);
    if (answer) record();
  });
  from.once('close', () => {
    if (!out.destroyed && from.rstCode !== constants.NGHTTP2_NO_ERROR)
      out.close(from.rstCode ?? constants.NGHTTP2_CANCEL);
  });
  if (!from.endAfterHeaders) from.pipe(out);

  const record = (): void => {
    const ended = Date.now();
    const head = answer ?? {};
    const sentAt = sent || ended;
    const timings = { send: sentAt - started, wait: Math.max(0, waited - sentAt), receive: ended - waited };
    const url = requestUrl(headers, conn, conn.tls);
    const requestMime = String(headers['content-type'] ?? '');
    const answerMime = String(head['content-type'] ?? '');
    const postBody = requestBody.size > 0 ? harBody(requestBody.bytes(), requestBody.size, requestMime) : undefined;
    const trailing = harHeadersOf(trailers);
    har.add({
      startedDateTime: new Date(started).toISOString(),
      time: timings.send + timings.wait + timings.receive,
      request: {
        method: String(headers[':method'] ?? 'GET'),
        url: url.href,
        httpVersion: 'HTTP/2',
        cookies: [],
        headers: harHeadersOf(headers),
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
        status: Number(head[':status'] ?? 0),
        statusText: '',
        httpVersion: 'HTTP/2',
        cookies: [],
        headers: harHeadersOf(head),
        content: harBody(answerBody.bytes(), answerBody.size, answerMime),
        redirectURL: '',
        headersSize: -1,
        bodySize: answerBody.size,
        ...(trailing.length > 0 ? { _trailers: trailing } : {}),
      },
      cache: {},
      timings: { blocked: -1, dns: -1, connect: -1, ssl: -1, ...timings },
      ...(conn.pod ? { _pod: conn.pod } : {}),
      _port: conn.port,
      _localPort: conn.localPort,
    });
  };
}
