// How the shadow API proxy passes a read or a WebSocket watch to the API server with Node's own http/https: the answer
// streams back as it comes (a watch's head at once, its events as they happen), and either side going away ends the
// other. Writes never come here (proxy.ts sends them as dry runs).
import { request as httpRequest, type Agent, type IncomingMessage, type ServerResponse } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { Duplex } from 'node:stream';

/** Headers that belong to one connection (RFC 9110 §7.6.1), never passed on. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);
/** Not passed upstream either: the host is the upstream's own, the credentials the user's, and a read has no body. */
const NOT_PASSED = new Set([...HOP_BY_HOP, 'host', 'authorization', 'content-length']);

export interface Upstream {
  /** The request's URL at the API server (its own path prefix, such as a gateway's /k8s/clusters/ID, included). */
  url: URL;
  agent: Agent;
  /** The user's credentials for this request. */
  credentials: Record<string, string>;
}

/** The client's end-to-end headers, with the user's credentials in place of the proxy's token. */
function passedHeaders(from: IncomingMessage['headers'], credentials: Record<string, string>): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(from)) {
    if (value === undefined || NOT_PASSED.has(name)) continue;
    headers[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  for (const [name, value] of Object.entries(credentials)) headers[name.toLowerCase()] = value;
  return headers;
}

function answerHeaders(answer: IncomingMessage): Record<string, string | string[]> {
  const headers: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(answer.headers))
    if (value !== undefined && !HOP_BY_HOP.has(name)) headers[name] = value;
  return headers;
}

/**
 * A read (GET, HEAD, OPTIONS): no body goes upstream (kube-apiserver reads none, and a body Node would send without
 * framing is the next request to the server). The head goes to the client at once: a watch's first event may be
 * minutes away, and a client waits for the head before it counts the watch as started.
 */
export function forwardRead(
  req: IncomingMessage,
  res: ServerResponse,
  upstream: Upstream,
  onError: (err: Error) => void,
): void {
  req.resume();
  const send = upstream.url.protocol === 'http:' ? httpRequest : httpsRequest;
  const out = send(
    upstream.url,
    { method: req.method, headers: passedHeaders(req.headers, upstream.credentials), agent: upstream.agent },
    (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.statusMessage, answerHeaders(answer));
      res.flushHeaders();
      answer.pipe(res);
      answer.on('error', () => res.destroy());
    },
  );
  // A watch whose client went away ends upstream too (keep-alive would otherwise hold it open for good).
  res.on('close', () => {
    if (!res.writableFinished) out.destroy();
  });
  out.on('error', onError);
  out.end();
}

/** A WebSocket upgrade (a watch): the API server's 101 goes back as it came, then bytes flow both ways. */
export function forwardUpgrade(
  req: IncomingMessage,
  socket: Duplex,
  head: Buffer,
  upstream: Upstream,
  onError: (err: Error) => void,
): void {
  const send = upstream.url.protocol === 'http:' ? httpRequest : httpsRequest;
  const headers = { ...passedHeaders(req.headers, upstream.credentials), connection: 'Upgrade', upgrade: 'websocket' };
  const out = send(upstream.url, { method: 'GET', headers, agent: upstream.agent });
  const head101 = (answer: IncomingMessage): string => {
    let lines = `HTTP/1.1 ${answer.statusCode} ${answer.statusMessage}\r\n`;
    for (let i = 0; i < answer.rawHeaders.length; i += 2)
      lines += `${answer.rawHeaders[i]}: ${answer.rawHeaders[i + 1]}\r\n`;
    return `${lines}\r\n`;
  };
  out.on('upgrade', (answer, upstreamSocket, upstreamHead) => {
    socket.write(head101(answer));
    if (upstreamHead.length > 0) socket.write(upstreamHead);
    if (head.length > 0) upstreamSocket.write(head);
    upstreamSocket.on('error', () => socket.destroy());
    socket.on('error', () => upstreamSocket.destroy());
    upstreamSocket.on('close', () => socket.destroy());
    socket.on('close', () => upstreamSocket.destroy());
    upstreamSocket.pipe(socket).pipe(upstreamSocket);
  });
  // The API server said no to the upgrade: its answer goes back (its body as Node decoded it), then the connection
  // ends.
  out.on('response', (answer) => {
    let lines = `HTTP/1.1 ${answer.statusCode} ${answer.statusMessage}\r\n`;
    for (const [name, value] of Object.entries(answerHeaders(answer)))
      for (const one of Array.isArray(value) ? value : [value]) lines += `${name}: ${one}\r\n`;
    socket.write(`${lines}connection: close\r\n\r\n`);
    answer.pipe(socket);
  });
  out.on('error', (err) => {
    onError(err);
    socket.destroy();
  });
  socket.on('error', () => out.destroy());
  out.end();
}
