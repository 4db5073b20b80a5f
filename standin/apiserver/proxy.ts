// The proxy subresources: pods/NAME[:PORT]/proxy[/path] and services/NAME[:PORT]/proxy[/path] forward any of their
// methods, query and body to the pod IP or a ready endpoint of the Service, as kube-apiserver does (kubernetes
// pkg/registry/core/pod/rest/subresources.go ProxyREST with pod/strategy.go ResourceLocation; pkg/registry/core/
// service/proxy.go with the service storage's ResourceLocation; apimachinery pkg/util/proxy upgradeaware.go and
// transport.go), WebSocket upgrades included. Nothing the API server reads (dryRun, say) stops what the app does.
import { request as httpRequest, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { connect as tcpConnect, isIPv4 } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import type { Duplex } from 'node:stream';
import { ApiError, badRequest, methodNotAllowed, notFound, type K8sObject } from './errors.js';
import type { Objects } from './objects.js';
import { sourceFor } from './service-endpoint.js';

/** ProxyREST.ConnectMethods (pods and services alike). */
const PROXY_METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS'];
/** Headers that end at the API server: hop-by-hop ones (httputil.ReverseProxy), the caller's credentials (removed by
 * the authentication filter) and Impersonate-* (removed by the impersonation filter). */
const DROPPED = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'authorization',
  'host',
]);
const PROXY_TIMEOUT_MS = 30_000;

interface Target {
  scheme: 'http' | 'https';
  host: string;
  port: number;
  localAddress?: string;
  /** The path below .../proxy, as sent to the app (at least "/"). */
  path: string;
}

/** utilnet.SplitSchemeNamePort: "name", "name:port" or "scheme:name:port" with scheme http or https. */
function splitSchemeNamePort(id: string, what: string): { scheme: string; name: string; port: string } {
  const parts = id.split(':');
  const [scheme, name, port] =
    parts.length === 1
      ? ['', parts[0], '']
      : parts.length === 2
        ? ['', parts[0], parts[1]]
        : parts.length === 3
          ? parts
          : ['', '', ''];
  if (!name || !['', 'http', 'https'].includes(scheme)) throw badRequest(`invalid ${what} request "${id}"`);
  return { scheme, name, port };
}

/**
 * The path below `/proxy` of a decoded request path (the {path:*} route parameter), with its trailing slash kept
 * (net.JoinPreservingTrailingSlash); undefined when the request names the bare `.../proxy` (empty path).
 */
export function proxyPath(decodedPath: string): string | undefined {
  const m = /^\/(?:api\/v1|apis\/[^/]+\/[^/]+)\/(?:namespaces\/[^/]+\/)?[^/]+\/[^/]+\/proxy(\/.*)?$/.exec(decodedPath);
  return m?.[1] || undefined;
}

/** Where a pods/NAME[:PORT]/proxy request goes: the pod's IP, the port named or the first container port. */
function podTarget(objects: Objects, ns: string, id: string): Omit<Target, 'path'> {
  const { scheme, name, port } = splitSchemeNamePort(id, 'pod');
  const pod = objects.store.get('/pods', ns, name);
  if (!pod) throw notFound('', 'pods', name);
  let p = port;
  if (!p)
    for (const c of pod.spec?.containers ?? [])
      if (c.ports?.length) {
        p = String(c.ports[0].containerPort);
        break;
      }
  const ip: string = pod.status?.podIPs?.[0]?.ip ?? pod.status?.podIP ?? '';
  if (!isIPv4(ip) || ip.startsWith('127.') || ip === '0.0.0.0') throw badRequest('address not allowed');
  // The port goes into the URL as given (Go would look a name up in /etc/services, not in the pod's ports).
  if (p && !/^\d+$/.test(p))
    throw new ApiError(503, 'ServiceUnavailable', `error trying to reach service: dial tcp: unknown port ${p}`);
  const number = Number(p || 80);
  return {
    scheme: scheme === 'https' ? 'https' : 'http',
    host: ip,
    port: number,
    localAddress: sourceFor(objects, ip),
  };
}

/** Where a services/NAME[:PORT]/proxy request goes: a ready endpoint of the port (by number → its name, or name). */
function serviceTarget(objects: Objects, ns: string, id: string): Omit<Target, 'path'> {
  const { scheme, name, port } = splitSchemeNamePort(id, 'service');
  const svc = objects.store.get('/services', ns, name);
  if (!svc) throw notFound('', 'services', name);
  let portName = port;
  if (/^\d+$/.test(port)) {
    const declared = (svc.spec?.ports ?? []).find((x: K8sObject) => x.port === Number(port));
    if (!declared) throw new ApiError(503, 'ServiceUnavailable', `no service port ${port} found for service "${name}"`);
    portName = declared.name ?? '';
  }
  const eps = objects.store.get('/endpoints', ns, name);
  for (const subset of eps?.subsets ?? []) {
    const addresses: K8sObject[] = subset.addresses ?? [];
    const epPort = (subset.ports ?? []).find((x: K8sObject) => (x.name ?? '') === portName);
    if (addresses.length === 0 || !epPort) continue;
    const ip = addresses[Math.floor(Math.random() * addresses.length)].ip;
    return {
      scheme: scheme === 'https' ? 'https' : 'http',
      host: ip,
      port: epPort.port,
      localAddress: sourceFor(objects, ip),
    };
  }
  throw new ApiError(503, 'ServiceUnavailable', `no endpoints available for service "${name}"`);
}

export interface ProxyRequest {
  resource: 'pods' | 'services';
  ns: string;
  /** NAME, NAME:PORT or SCHEME:NAME:PORT. */
  id: string;
  decodedPath: string;
}

function target(objects: Objects, r: ProxyRequest): Target {
  const t = r.resource === 'pods' ? podTarget(objects, r.ns, r.id) : serviceTarget(objects, r.ns, r.id);
  return { ...t, path: encodeURI(proxyPath(r.decodedPath) ?? '/') };
}

function forwardedHeaders(req: IncomingMessage, t: Target): IncomingHttpHeaders {
  const headers: IncomingHttpHeaders = {};
  for (const [k, v] of Object.entries(req.headers))
    if (v !== undefined && !DROPPED.has(k) && !k.startsWith('impersonate-')) headers[k] = v;
  headers.host = `${t.host}:${t.port}`;
  // transport.go's reverse proxy headers, and httputil.ReverseProxy's X-Forwarded-For.
  headers['x-forwarded-for'] = req.socket.remoteAddress ?? '127.0.0.1';
  headers['x-forwarded-uri'] = req.url?.split('?')[0] ?? '/';
  headers['x-forwarded-proto'] = 'https';
  return headers;
}

const unreachable = (e: Error) =>
  new ApiError(503, 'ServiceUnavailable', `error trying to reach service: ${e.message}`).toStatus();

/** Serves one proxy request (already authorized with the verb of its method). */
export function serveProxy(objects: Objects, req: IncomingMessage, res: ServerResponse, r: ProxyRequest): void {
  const method = req.method ?? 'GET';
  if (!PROXY_METHODS.includes(method)) throw methodNotAllowed();
  const url = new URL(req.url ?? '/', 'https://stand-in');
  // upgradeaware.go proxyRedirectsforRootPath: a GET or HEAD of the bare .../proxy is sent to .../proxy/.
  if (proxyPath(r.decodedPath) === undefined && (method === 'GET' || method === 'HEAD')) {
    res.writeHead(301, { Location: `${url.pathname}/${url.search}` });
    return void res.end();
  }
  const t = target(objects, r);
  const send = t.scheme === 'https' ? httpsRequest : httpRequest;
  const out = send(
    {
      host: t.host,
      port: t.port,
      localAddress: t.localAddress,
      method,
      path: `${t.path}${url.search}`,
      headers: forwardedHeaders(req, t),
      // The apiserver's proxy transport does not verify pods' serving certificates (https:NAME:PORT).
      rejectUnauthorized: false,
      timeout: PROXY_TIMEOUT_MS,
    },
    (up) => {
      const headers = { ...up.headers };
      for (const h of DROPPED) if (h !== 'host' && h !== 'authorization') delete headers[h];
      res.writeHead(up.statusCode ?? 502, headers);
      up.pipe(res);
    },
  );
  out.on('timeout', () => out.destroy(new Error('i/o timeout')));
  out.on('error', (e) => {
    if (res.headersSent) return res.destroy();
    const body = JSON.stringify(unreachable(e));
    res.writeHead(503, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
    res.end(body);
  });
  req.pipe(out);
}

/** An upgrade (WebSocket) through a proxy subresource: the request head is replayed to the app, then bytes flow. */
export function upgradeProxy(objects: Objects, req: IncomingMessage, socket: Duplex, head: Buffer, r: ProxyRequest) {
  const t = target(objects, r);
  const url = new URL(req.url ?? '/', 'https://stand-in');
  const headers = forwardedHeaders(req, t);
  headers.connection = 'Upgrade';
  const lines = [`${req.method} ${t.path}${url.search} HTTP/1.1`];
  for (const [k, v] of Object.entries(headers)) for (const value of [v].flat()) lines.push(`${k}: ${value}`);
  const options = { host: t.host, port: t.port, localAddress: t.localAddress };
  const up = t.scheme === 'https' ? tlsConnect({ ...options, rejectUnauthorized: false }) : tcpConnect(options);
  up.once(t.scheme === 'https' ? 'secureConnect' : 'connect', () => {
    up.write(`${lines.join('\r\n')}\r\n\r\n`);
    if (head.length) up.write(head);
    up.pipe(socket);
    socket.pipe(up);
  });
  up.on('error', (e) => {
    const body = JSON.stringify(unreachable(e));
    socket.end(
      `HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: ` +
        `${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
  });
  socket.on('error', () => up.destroy());
  socket.on('close', () => up.destroy());
  up.on('close', () => socket.destroy());
}
