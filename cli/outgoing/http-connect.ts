// HTTP proxy side of the local proxy: CONNECT tunnels (HTTPS, anything) and absolute-URI plain HTTP requests, each
// dialled through the cluster once Proxy-Authorization carries the session's secret (else 407); a failed dial is a 502
// whose body and X-Devop-Error header name the reason.
import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type RequestOptions,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { DialError, toDialError, type ClusterDialer, type DialErrorCode } from './dialer.js';
import { basicMatches, type ProxyRefusal } from './proxy-auth.js';
import { joinStreams } from './streams.js';

/** Headers that belong to one hop (RFC 9110 §7.6.1) and are not passed on. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

export interface ProxyDialEvent {
  via: 'socks5' | 'http-connect' | 'http' | 'preload' | 'netns';
  host: string;
  port: number;
  error?: { code: DialErrorCode; message: string };
}

export interface HttpProxyOptions {
  dialer: ClusterDialer;
  onDial?: (event: ProxyDialEvent) => void;
  /** The session's secret: every request and CONNECT must carry Proxy-Authorization: Basic devop:SECRET. */
  secret: string;
  /** Called for every request refused for want of the secret. */
  onRefused?: (refusal: ProxyRefusal) => void;
}

/** 407 (RFC 9110 §15.5.8): the challenge names Basic, which is what clients send from a proxy URL's user:password. */
const PROXY_AUTH_REQUIRED =
  'HTTP/1.1 407 Proxy Authentication Required\r\n' +
  'Proxy-Authenticate: Basic realm="devop"\r\n' +
  'Content-Type: text/plain; charset=utf-8\r\n' +
  'Connection: close\r\n';
const PROXY_AUTH_BODY =
  "devop: this proxy takes the session's credentials only: use the HTTP_PROXY / ALL_PROXY URL devop set\n";

/** Whether a request may use the proxy; if not, it is counted, answered 407 and its connection closed here. */
function admitted(req: IncomingMessage, answer: Duplex | ServerResponse, options: HttpProxyOptions): boolean {
  if (basicMatches(req.headers['proxy-authorization'], options.secret)) return true;
  options.onRefused?.({
    via: 'http',
    reason: req.headers['proxy-authorization'] ? 'wrong Proxy-Authorization' : 'no Proxy-Authorization',
  });
  if ('writeHead' in answer) {
    answer.shouldKeepAlive = false;
    answer
      .writeHead(407, {
        'proxy-authenticate': 'Basic realm="devop"',
        'content-type': 'text/plain; charset=utf-8',
        connection: 'close',
      })
      .end(PROXY_AUTH_BODY);
  } else if (answer.writable) {
    answer.end(`${PROXY_AUTH_REQUIRED}Content-Length: ${Buffer.byteLength(PROXY_AUTH_BODY)}\r\n\r\n${PROXY_AUTH_BODY}`);
  } else answer.destroy();
  return false;
}

/** Splits `host:port` / `[v6]:port` (CONNECT's authority form). */
export function parseAuthority(authority: string, defaultPort?: number): { host: string; port: number } | undefined {
  const match = /^(?:\[([^\]]+)\]|([^:[\]]+))(?::(\d{1,5}))?$/.exec(authority);
  if (!match) return undefined;
  const host = match[1] ?? match[2];
  const port = match[3] === undefined ? defaultPort : Number(match[3]);
  if (!host || port === undefined || port < 1 || port > 65535) return undefined;
  return { host, port };
}

/** One line naming why a dial failed, e.g. "ENOTFOUND: nosuch.default does not resolve in the cluster". */
export function describeDialError(err: DialError, host: string, port: number): string {
  switch (err.code) {
    case 'ENOTFOUND':
      return `ENOTFOUND: ${host} does not resolve from the pod (cluster DNS)`;
    case 'EAI_AGAIN':
      return `EAI_AGAIN: the pod's DNS did not answer for ${host} (${err.message})`;
    case 'ECONNREFUSED':
      return `ECONNREFUSED: ${host}:${port} refused the connection from the pod`;
    case 'ETIMEDOUT':
      return `ETIMEDOUT: ${host}:${port} did not answer the pod in time`;
    case 'EHOSTUNREACH':
    case 'ENETUNREACH':
      return `${err.code}: ${host}:${port} is unreachable from the pod`;
    default:
      return `${err.code}: connecting to ${host}:${port} from the pod failed (${err.message})`;
  }
}

function badGatewayHead(reason: string, code: string): string {
  const body = `devop: ${reason}\n`;
  return (
    'HTTP/1.1 502 Bad Gateway\r\n' +
    'Content-Type: text/plain; charset=utf-8\r\n' +
    `X-Devop-Error: ${code}\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\n` +
    'Connection: close\r\n\r\n' +
    body
  );
}

/** An http.Server that is never listened on: the local proxy hands it the connections whose first byte is not SOCKS. */
export function createHttpProxyServer(options: HttpProxyOptions): Server {
  const { dialer, onDial } = options;
  const server = createServer({ requestTimeout: 0 });

  server.on('connect', (req: IncomingMessage, client: Duplex, head: Buffer) => {
    if (!admitted(req, client, options)) return;
    const target = parseAuthority(req.url ?? '');
    if (!target) {
      client.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
      return;
    }
    dialer.connect(target.host, target.port).then(
      (remote) => {
        onDial?.({ via: 'http-connect', ...target });
        if (client.destroyed) {
          remote.destroy();
          return;
        }
        client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
        if (head.length > 0) remote.write(head);
        void joinStreams(client, remote);
      },
      (err: unknown) => {
        const dialError = toDialError(err, `connect ${target.host}:${target.port}`);
        onDial?.({ via: 'http-connect', ...target, error: { code: dialError.code, message: dialError.message } });
        client.end(badGatewayHead(describeDialError(dialError, target.host, target.port), dialError.code));
      },
    );
  });

  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    if (admitted(req, res, options)) forwardPlainRequest(req, res, options);
  });
  server.on('upgrade', (req: IncomingMessage, client: Duplex, head: Buffer) => {
    if (admitted(req, client, options)) forwardUpgrade(req, client, head, options);
  });
  // A client that sends garbage gets a 400 from Node itself; make sure its socket never crashes the proxy.
  server.on('clientError', (_err, socket: Duplex) => {
    if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
    else socket.destroy();
  });
  return server;
}

function forwardPlainRequest(req: IncomingMessage, res: ServerResponse, { dialer, onDial }: HttpProxyOptions): void {
  let url: URL;
  try {
    url = new URL(req.url ?? '');
  } catch {
    res.writeHead(400, { 'content-type': 'text/plain; charset=utf-8', connection: 'close' });
    res.end("devop: this is devop's outgoing proxy; send absolute-URI requests (http://host/path) or CONNECT\n");
    return;
  }
  if (url.protocol !== 'http:') {
    res.writeHead(501, { 'content-type': 'text/plain; charset=utf-8' });
    res.end(`devop: the proxy forwards plain http:// requests; use CONNECT for ${url.protocol}\n`);
    return;
  }
  const host = url.hostname.replace(/^\[|\]$/g, '');
  const port = url.port ? Number(url.port) : 80;
  const headers: Record<string, string | string[]> = {};
  const listed = new Set(
    String(req.headers.connection ?? '')
      .split(',')
      .map((name) => name.trim().toLowerCase()),
  );
  for (const [name, value] of Object.entries(req.headers)) {
    if (value === undefined || HOP_BY_HOP.has(name) || listed.has(name)) continue;
    headers[name] = value;
  }
  if (!headers.host) headers.host = url.host;

  let dialFailed = false;
  const upstream = httpRequest({
    host,
    port,
    method: req.method,
    path: `${url.pathname}${url.search}`,
    headers,
    createConnection: (_opts: unknown, done: (err: Error | null, socket?: Duplex) => void) => {
      dialer.connect(host, port).then(
        (remote) => {
          onDial?.({ via: 'http', host, port });
          done(null, remote);
        },
        (err: unknown) => {
          dialFailed = true;
          const dialError = toDialError(err, `connect ${host}:${port}`);
          onDial?.({ via: 'http', host, port, error: { code: dialError.code, message: dialError.message } });
          done(dialError);
        },
      );
      return undefined;
    },
  } as unknown as RequestOptions);
  upstream.on('response', (upstreamRes) => {
    const out: Record<string, string | string[]> = {};
    for (const [name, value] of Object.entries(upstreamRes.headers)) {
      if (value === undefined || name === 'connection' || name === 'keep-alive' || name === 'proxy-connection')
        continue;
      out[name] = value;
    }
    res.writeHead(upstreamRes.statusCode ?? 502, upstreamRes.statusMessage, out);
    upstreamRes.pipe(res);
    upstreamRes.on('error', () => res.destroy());
  });
  upstream.on('error', (err) => {
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const dialError = err instanceof DialError ? err : toDialError(err, `${req.method} ${url.href}`);
    const reason = dialFailed
      ? describeDialError(dialError, host, port)
      : `${dialError.code}: ${host}:${port} failed during the request (${err.message})`;
    const body = `devop: ${reason}\n`;
    res.writeHead(502, {
      'content-type': 'text/plain; charset=utf-8',
      'x-devop-error': dialError.code,
      connection: 'close',
    });
    res.end(body);
  });
  res.on('close', () => {
    if (!res.writableFinished) upstream.destroy();
  });
  req.pipe(upstream);
}

/**
 * An absolute-URI request that upgrades the connection (WebSocket over plain http://): the head is passed on in origin
 * form and the two connections are joined, so the upgrade's answer and everything after it flow through untouched.
 */
function forwardUpgrade(
  req: IncomingMessage,
  client: Duplex,
  head: Buffer,
  { dialer, onDial }: HttpProxyOptions,
): void {
  let url: URL;
  try {
    url = new URL(req.url ?? '');
    if (url.protocol !== 'http:') throw new Error(url.protocol);
  } catch {
    client.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
    return;
  }
  const host = url.hostname.replace(/^\[|\]$/g, '');
  const port = url.port ? Number(url.port) : 80;
  const lines = [`${req.method} ${url.pathname}${url.search} HTTP/${req.httpVersion}`];
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    if (!/^proxy-/i.test(req.rawHeaders[i])) lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
  }
  dialer.connect(host, port).then(
    (remote) => {
      onDial?.({ via: 'http', host, port });
      remote.write(`${lines.join('\r\n')}\r\n\r\n`);
      if (head.length > 0) remote.write(head);
      void joinStreams(client, remote);
    },
    (err: unknown) => {
      const dialError = toDialError(err, `connect ${host}:${port}`);
      onDial?.({ via: 'http', host, port, error: { code: dialError.code, message: dialError.message } });
      client.end(badGatewayHead(describeDialError(dialError, host, port), dialError.code));
    },
  );
}

/** Hands an accepted socket (first byte already peeked and put back) to the HTTP side. */
export function acceptHttp(server: Server, socket: Socket): void {
  server.emit('connection', socket);
}
