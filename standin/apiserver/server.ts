// The stand-in's HTTPS API server: authentication, authorization, routing of discovery, OpenAPI, resources, streaming
// subresources and aggregated APIs, with every error answered as a metav1.Status.
import { createServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { ApiError, badRequest, toApiError, type K8sObject } from './errors.js';
import type { Authenticator, Identity } from './auth.js';
import type { Catalog } from './catalog.js';
import { apiGroup, apiGroupList, apiResourceList, apiVersions, SERVER_VERSION } from './discovery.js';
import { OpenApi, OpenApiSchemas } from './openapi.js';
import type { Objects } from './objects.js';
import { VIRTUAL_RESOURCES, type ResourceType } from './resources.js';
import { handleResource, handleReview, sendJson, type ResourceRequest } from './rest.js';
import { queryFlag } from './selectors.js';
import { createStreamServer, serveLogs } from './streams.js';
import { Admission } from './admission.js';
import { debugFlags } from './debug-flags.js';
import { type ProxyRequest, serveProxy, upgradeProxy } from './proxy.js';
import type { Aggregator } from './aggregator.js';
import type { NodeRuntime } from '../node-runtime.js';

export interface ApiServerOptions {
  cert: string;
  key: string;
  objects: Objects;
  catalog: Catalog;
  auth: Authenticator;
  aggregator: Aggregator;
  runtime: () => NodeRuntime | undefined;
  host?: string;
}

export interface ApiServer {
  server: Server;
  url: string;
  port: number;
  dropPortForwards(): void;
  /** The log verbosity last set through PUT /debug/flags/v. */
  logVerbosity(): string;
  /** Ends every open watch response (clients then resume from their last resourceVersion). */
  endWatches(): void;
  close(): Promise<void>;
}

interface Route {
  group: string;
  version: string;
  ns: string;
  resource?: string;
  name?: string;
  sub?: string;
}

/**
 * The URL's path as Go's net/url gives it to kube-apiserver (URL.Path is decoded; k8s.io/apiserver pkg/endpoints/
 * request/requestinfo.go splits that): `pods/x%2Fexec` is the exec subresource of pod x, not a pod named "x/exec".
 */
export function decodedPath(rawPath: string): string {
  try {
    return decodeURIComponent(rawPath);
  } catch {
    throw badRequest(`invalid URL escape in the path "${rawPath}"`);
  }
}

/** Splits a decoded /api/v1/... or /apis/<g>/<v>/... into group, version, namespace, resource, name, subresource. */
export function parseResourcePath(path: string): Route | undefined {
  const seg = path.split('/').filter((s) => s !== '');
  let group: string;
  let version: string;
  let rest: string[];
  if (seg[0] === 'api' && seg.length >= 2) [group, version, rest] = ['', seg[1], seg.slice(2)];
  else if (seg[0] === 'apis' && seg.length >= 3) [group, version, rest] = [seg[1], seg[2], seg.slice(3)];
  else return undefined;
  if (rest.length === 0) return { group, version, ns: '' };
  if (
    rest[0] === 'namespaces' &&
    rest.length >= 3 &&
    !(rest.length === 3 && ['status', 'finalize'].includes(rest[2]))
  ) {
    return { group, version, ns: rest[1], resource: rest[2], name: rest[3], sub: rest[4] };
  }
  return { group, version, ns: '', resource: rest[0], name: rest[1], sub: rest[2] };
}

function verbOf(method: string, name: string | undefined, q: URLSearchParams, sub?: string): string {
  if (sub && ['exec', 'portforward', 'attach', 'binding', 'eviction', 'token'].includes(sub)) return 'create';
  switch (method) {
    case 'GET':
    case 'HEAD':
      return name ? 'get' : queryFlag(q, 'watch') ? 'watch' : 'list';
    case 'POST':
      return 'create';
    case 'PUT':
      return 'update';
    case 'PATCH':
      return 'patch';
    case 'DELETE':
      return name ? 'delete' : 'deletecollection';
    default:
      return method.toLowerCase();
  }
}

export async function startApiServer(o: ApiServerOptions): Promise<ApiServer> {
  const streams = createStreamServer(o.runtime);
  const watchStops = new Set<() => void>();
  const track = (stop: () => void) => {
    watchStops.add(stop);
    return () => {
      watchStops.delete(stop);
    };
  };
  const schemas = new OpenApiSchemas();
  const openapi = new OpenApi(o.catalog, schemas);
  const restCtx = { objects: o.objects, auth: o.auth, track, admission: new Admission(o.objects), schemas };
  let address = '';
  const debug = debugFlags();

  /** The request's identity: its bearer token, then its Impersonate-* headers (which are not passed on). */
  const actingAs = (req: IncomingMessage): Identity => {
    const id = o.auth.impersonate(o.auth.authenticate(req.headers.authorization), req.headersDistinct);
    for (const h of Object.keys(req.headers)) if (h.startsWith('impersonate-')) delete req.headers[h];
    return id;
  };

  /** A pods/…/proxy or services/…/proxy request. */
  const proxyRequest = (
    r: { t: ResourceType; ns: string; name?: string; sub?: string },
    rawPath: string,
  ): ProxyRequest | undefined => {
    if (r.sub !== 'proxy' || r.t.group !== '' || !r.name) return undefined;
    // kube-apiserver would dial the kubelet's server (nodeIP:10250); the stand-in's kubelet has none, so say so.
    if (r.t.resource === 'nodes')
      throw new ApiError(
        503,
        'ServiceUnavailable',
        'error trying to reach service: the stand-in kubelet serves no HTTPS port (nodes/NAME/proxy is not served)',
      );
    if (r.t.resource !== 'pods' && r.t.resource !== 'services') return undefined;
    return { resource: r.t.resource, ns: r.ns, id: r.name, decodedPath: decodedPath(rawPath) };
  };

  const resolve = (r: Route): { t: ResourceType; name?: string; sub?: string; ns: string } => {
    if (!r.resource) throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
    const t = o.catalog.find(r.group, r.version, r.resource);
    if (!t) throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
    if (!t.namespaced && r.ns) throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
    return { t, name: r.name, sub: r.sub, ns: r.ns };
  };

  const authorize = (
    id: Identity,
    method: string,
    route: { t: ResourceType; ns: string; name?: string; sub?: string },
    q: URLSearchParams,
  ) => {
    const isNamespaceObject = route.t.group === '' && route.t.resource === 'namespaces';
    o.auth.authorize(id, {
      verb: verbOf(method, route.name, q, route.sub),
      apiGroup: route.t.group,
      resource: route.t.resource,
      subresource: route.sub,
      namespace: route.t.namespaced ? route.ns || undefined : isNamespaceObject ? route.name : undefined,
      name: route.name,
    });
  };

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'https://stand-in');
    const path = decodedPath(url.pathname).replace(/\/+$/, '') || '/';
    const q = url.searchParams;
    const method = req.method ?? 'GET';
    if (path === '/healthz' || path === '/livez' || path === '/readyz') {
      res.writeHead(200, { 'Content-Type': 'text/plain' });
      return res.end('ok');
    }
    const id = actingAs(req);
    if (path === '/version') return sendJson(res, 200, SERVER_VERSION);
    if (path === '/api') return sendJson(res, 200, apiVersions(address));
    if (path === '/apis') return sendJson(res, 200, apiGroupList(o.catalog, o.aggregator.groups()));
    const aggregatedOpenApi = /^\/openapi\/v3\/apis\/([^/]+)\/([^/]+)$/.exec(path);
    if (aggregatedOpenApi && o.aggregator.handles(aggregatedOpenApi[1], aggregatedOpenApi[2])) {
      return o.aggregator.proxy(req, res, id, { group: aggregatedOpenApi[1], version: aggregatedOpenApi[2] });
    }
    if (path === '/openapi/v3' || path.startsWith('/openapi/v3/')) {
      return openapi.serveV3(req, res, path, q, () => o.aggregator.openapiV3Paths());
    }
    if (path === '/openapi/v2') return openapi.serveV2(req, res, () => o.aggregator.openapiV2Docs());
    if (path === '/debug/flags' || path.startsWith('/debug/flags/')) {
      o.auth.authorizeNonResource(id, method.toLowerCase(), path);
      return debug.serve(req, res, path);
    }
    const groupOnly = /^\/apis\/([^/]+)$/.exec(path);
    if (groupOnly) {
      const g = apiGroup(o.catalog, groupOnly[1], o.aggregator.groups());
      if (!g) throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
      return sendJson(res, 200, g);
    }
    const route = parseResourcePath(path);
    if (!route) throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
    if (route.group && o.aggregator.handles(route.group, route.version)) {
      // Authorized here first, as every request is (apiserver pkg/endpoints/filters/authorization.go runs before
      // kube-aggregator's proxy); discovery of the group-version is a non-resource path everyone may get.
      if (route.resource)
        o.auth.authorize(id, {
          verb: verbOf(method, route.name, q, route.sub),
          apiGroup: route.group,
          resource: route.resource,
          subresource: route.sub,
          namespace: route.ns || undefined,
          name: route.name,
        });
      return o.aggregator.proxy(req, res, id);
    }
    if (!route.resource) {
      const types = o.catalog.all().filter((t) => t.group === route.group && t.version === route.version);
      if (types.length === 0) throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
      return sendJson(
        res,
        200,
        apiResourceList(types, route.group ? `${route.group}/${route.version}` : route.version),
      );
    }
    const r = resolve(route);
    authorize(id, method, r, q);
    const warn = (text: string) => res.appendHeader('Warning', `299 - ${JSON.stringify(text)}`);
    const rr: ResourceRequest = { method, t: r.t, ns: r.ns, name: r.name, sub: r.sub, query: q, identity: id, warn };
    if (VIRTUAL_RESOURCES.has(r.t.resource)) return handleReview(restCtx, req, res, rr);
    if (r.t.group === '' && r.t.resource === 'pods' && r.sub === 'log') {
      const pod = o.objects.get(r.t, r.ns, r.name ?? '');
      return serveLogs(o.runtime(), pod, q, res);
    }
    const proxied = proxyRequest(r, url.pathname);
    if (proxied) return serveProxy(o.objects, req, res, proxied);
    if (r.t.group === '' && r.t.resource === 'pods' && ['exec', 'portforward', 'attach'].includes(r.sub ?? '')) {
      throw new ApiError(400, 'BadRequest', 'Upgrade request required');
    }
    return handleResource(restCtx, req, res, rr);
  };

  const fail = (res: ServerResponse, e: unknown) => {
    const err = toApiError(e);
    if (err.code === 500) console.error('stand-in apiserver:', e);
    if (res.headersSent) return res.end();
    sendJson(res, err.code, err.toStatus());
  };

  const server = createServer({ cert: o.cert, key: o.key }, (req, res) => {
    handle(req, res).catch((e) => fail(res, e));
  });

  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const refuse = (e: unknown) => {
      const err = e instanceof ApiError ? e : new ApiError(500, 'InternalError', (e as Error).message);
      const body = JSON.stringify(err.toStatus());
      socket.end(
        `HTTP/1.1 ${err.code} ${err.reason}\r\nContent-Type: application/json\r\nContent-Length: ` +
          `${Buffer.byteLength(body)}\r\n\r\n${body}`,
      );
    };
    try {
      const url = new URL(req.url ?? '/', 'https://stand-in');
      const q = url.searchParams;
      const id = actingAs(req);
      const route = parseResourcePath(decodedPath(url.pathname));
      if (route?.group && o.aggregator.handles(route.group, route.version))
        throw new ApiError(400, 'BadRequest', 'upgrades are not proxied to aggregated APIs by the stand-in');
      if (!route) throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
      const r = resolve(route);
      if (r.sub === 'proxy') authorize(id, req.method ?? 'GET', r, q);
      const proxied = proxyRequest(r, url.pathname);
      if (proxied) return upgradeProxy(o.objects, req, socket, head, proxied);
      if (
        !(
          r.t.group === '' &&
          r.t.resource === 'pods' &&
          (r.sub === 'exec' || r.sub === 'portforward' || r.sub === 'attach')
        )
      ) {
        throw new ApiError(400, 'BadRequest', 'this resource does not support upgrades');
      }
      authorize(id, req.method ?? 'GET', r, q);
      const pod = o.objects.get(r.t, r.ns, r.name ?? '');
      if (r.sub === 'exec' || r.sub === 'attach')
        streams.upgradeRemoteCommand(r.sub, req, socket, head, pod as K8sObject, q);
      else streams.upgradePortForward(req, socket, head, pod as K8sObject, q);
    } catch (e) {
      refuse(e);
    }
  });

  const host = o.host ?? '127.0.0.1';
  await new Promise<void>((resolveListen, reject) => {
    server.once('error', reject);
    server.listen(0, host, () => resolveListen());
  });
  const port = (server.address() as AddressInfo).port;
  address = `${host}:${port}`;
  return {
    server,
    url: `https://${host}:${port}`,
    port,
    dropPortForwards: () => streams.dropPortForwards(),
    logVerbosity: () => debug.verbosity(),
    endWatches: () => {
      for (const stop of [...watchStops]) stop();
    },
    close: async () => {
      for (const stop of [...watchStops]) stop();
      streams.closeAll();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
