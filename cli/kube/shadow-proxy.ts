// The shadow API proxy of `devop exec --shadow`: a local HTTP server that the local command's kubeconfig points at.
// Reads and watches pass through to the real API server with the user's credentials (streamed by http-proxy, which
// also carries WebSocket upgrades); every write goes out with dryRun=All, so the cluster validates, defaults and
// admits it and stores nothing; Leases are answered from memory (shadow-leases.ts). Each write is reported.
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import { Agent, createServer, request as httpsRequest, type AgentOptions } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import type { KubeConfig } from '@kubernetes/client-node';
import httpProxy from 'http-proxy';
import { makeSessionCert } from '../session/cert.js';
import { LeaseMemory, statusBody, type KubeObject } from './shadow-leases.js';

/** One write of the local command, as the proxy handled it. */
export interface ShadowWrite {
  /** create | update | patch | delete | deletecollection, as kube-apiserver names the verbs. */
  verb: string;
  /** The object's kind when known (from the answer or the object before), else the resource (`deployments`). */
  kind: string;
  resource: string;
  subresource?: string;
  namespace?: string;
  name?: string;
  /** The HTTP status the local command got. */
  status: number;
  /** dry-run: the API server accepted it and stored nothing; in memory: a Lease; refused: the API server said no. */
  result: 'dry-run' | 'in memory' | 'refused';
  /** The Status message of a refused write. */
  message?: string;
  /** The object before (null: it did not exist; absent: unknown) and as the write would leave it (null: deleted). */
  before?: unknown;
  after?: unknown;
}

export interface ShadowProxyOptions {
  kc: KubeConfig;
  onWrite(write: ShadowWrite): void;
  /** Reported once per kind of problem the proxy meets (an upstream error, a refused upgrade). */
  onWarning?(message: string): void;
}

export interface ShadowProxy {
  /** https://127.0.0.1:PORT */
  url: string;
  port: number;
  /** The proxy's self-signed certificate: the CA the local command's kubeconfig trusts. */
  caPem: string;
  /** The bearer token the local command must send (its kubeconfig carries it): no other local process gets in. */
  token: string;
  close(): Promise<void>;
}

/** A parsed Kubernetes resource path: /api/v1/… or /apis/GROUP/VERSION/… */
export interface ApiPath {
  group: string;
  version: string;
  namespace?: string;
  resource: string;
  name?: string;
  subresource?: string;
}

/** kube-apiserver's own limit on a request (--request-timeout's default): a write still unanswered then has failed. */
const WRITE_TIMEOUT_MS = 60_000;
/** Largest write body the proxy reads (kube-apiserver's own limit is 3 MiB). */
const MAX_WRITE_BODY = 3 * 1024 * 1024;
/** The groups of the kinds whose create only answers (access and token reviews): they store nothing. */
const REVIEW_GROUPS = new Set(['authorization.k8s.io', 'authentication.k8s.io']);
/** Subresources that run something in a container: a write the API server cannot dry-run, so refused. */
const EXEC_SUBRESOURCES = new Set(['exec', 'attach']);
const WRITE_VERBS: Record<string, string> = { POST: 'create', PUT: 'update', PATCH: 'patch', DELETE: 'delete' };
/** Headers of the local command's request that go with a write (the rest are the proxy's business). */
const FORWARDED_HEADERS = ['content-type', 'accept', 'user-agent', 'accept-encoding'];

export function parseApiPath(pathname: string): ApiPath | undefined {
  const parts = pathname.split('/').filter(Boolean).map(decodeURIComponent);
  let group: string;
  let version: string;
  let rest: string[];
  if (parts[0] === 'api' && parts.length >= 3) [group, version, rest] = ['', parts[1], parts.slice(2)];
  else if (parts[0] === 'apis' && parts.length >= 4) [group, version, rest] = [parts[1], parts[2], parts.slice(3)];
  else return undefined;
  // namespaces/NS/RESOURCE/…, except a namespace's own subresources (namespaces/NS/status, …/finalize).
  if (rest[0] === 'namespaces' && rest.length >= 3 && !(rest.length === 3 && ['status', 'finalize'].includes(rest[2])))
    return { group, version, namespace: rest[1], resource: rest[2], name: rest[3], subresource: rest[4] };
  return { group, version, resource: rest[0], name: rest[1], subresource: rest[2] };
}

/**
 * An access or token review: passes as it is (it stores nothing). Only the built-in groups: a custom resource whose
 * name ends in "reviews" is stored like any other, so it is a dry run.
 */
export function isReview(path: ApiPath | undefined): boolean {
  return Boolean(path && REVIEW_GROUPS.has(path.group) && path.resource.endsWith('reviews') && !path.name);
}

export async function startShadowProxy(options: ShadowProxyOptions): Promise<ShadowProxy> {
  const { kc } = options;
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error('shadow proxy: the kubeconfig has no current cluster');
  const upstream = new URL(cluster.server);
  const tls: Record<string, unknown> = {};
  await applyUser(kc, upstream, tls);
  // One keep-alive agent with the user's TLS material (CA, client certificate) for every upstream request.
  // (A plain http:// server, such as `kubectl proxy`, gets a plain keep-alive agent.)
  const agent =
    upstream.protocol === 'http:'
      ? new HttpAgent({ keepAlive: true })
      : new Agent({
          keepAlive: true,
          ...(pick(tls, [
            'ca',
            'cert',
            'key',
            'pfx',
            'passphrase',
            'servername',
            'rejectUnauthorized',
          ]) as AgentOptions),
        });
  const token = randomBytes(24).toString('hex');
  const leases = new LeaseMemory();
  const proxy = httpProxy.createProxyServer({
    // The server's own path (a gateway's /k8s/clusters/ID) is kept: http-proxy prepends it to each request's path.
    target: cluster.server,
    agent,
    changeOrigin: true,
    secure: tls.rejectUnauthorized !== false,
    ws: true,
  });
  const warned = new Set<string>();
  const warn = (message: string): void => {
    if (warned.has(message)) return;
    warned.add(message);
    options.onWarning?.(message);
  };
  proxy.on('proxyReq', (proxyReq, _req, res) => {
    // A watch whose client went away must end upstream too: http-proxy only listens for 'aborted', which a request
    // that has been read to its end (every GET) never emits.
    res.on('close', () => {
      if (!res.writableFinished) proxyReq.destroy();
    });
  });
  proxy.on('proxyRes', (_proxyRes, _req, res) => {
    // Node sends the head with the first byte of the body; a watch's first event may be minutes away, and a client
    // waits for the head before it counts the watch as started. The head goes at once (http-proxy sets it up after
    // this event, in the same turn).
    process.nextTick(() => {
      if (!res.headersSent && !res.destroyed) res.flushHeaders();
    });
  });
  proxy.on('error', (err, _req, res) => {
    warn(`shadow API proxy: ${err.message}`);
    if ('writeHead' in res && !res.headersSent) sendJson(res, 502, statusBody(502, 'BadGateway', err.message));
    else res.destroy();
  });

  /** The user's credentials for one upstream request (exec plugins may refresh a token between requests). */
  const userHeaders = async (): Promise<Record<string, string>> => {
    const opts: { headers?: Record<string, string>; auth?: string } = {};
    await applyUser(kc, upstream, opts);
    const headers = { ...(opts.headers ?? {}) };
    if (opts.auth) headers.Authorization = `Basic ${Buffer.from(opts.auth).toString('base64')}`;
    return headers;
  };
  const authorized = (req: IncomingMessage): boolean => {
    const given = Buffer.from(req.headers.authorization ?? '');
    const wanted = Buffer.from(`Bearer ${token}`);
    return given.length === wanted.length && timingSafeEqual(given, wanted);
  };
  /** The client's headers without its proxy token, with the user's credentials instead. */
  const asUser = async (req: IncomingMessage): Promise<void> => {
    delete req.headers.authorization;
    Object.assign(req.headers, lowerKeys(await userHeaders()));
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    if (!authorized(req)) return sendJson(res, 401, statusBody(401, 'Unauthorized', 'Unauthorized'));
    const url = new URL(req.url ?? '/', 'http://shadow');
    const path = parseApiPath(url.pathname);
    const method = req.method ?? 'GET';
    if (path?.group === 'coordination.k8s.io' && path.resource === 'leases' && path.namespace && !path.subresource) {
      if (path.name || method === 'POST') return answerLease(req, res, path, leases, options);
    }
    const verb = WRITE_VERBS[method];
    if (verb && !isReview(path)) {
      if (path?.subresource && EXEC_SUBRESOURCES.has(path.subresource))
        return sendJson(res, 403, statusBody(403, 'Forbidden', shadowRefusal(`pods/${path.subresource}`)));
      return forwardWrite(req, res, { url, path, verb, upstream, agent, headers: await userHeaders(), options });
    }
    await asUser(req);
    proxy.web(req, res);
  };

  const cert = makeSessionCert('devop shadow API proxy');
  const server = createServer(cert, (req, res) => {
    handle(req, res).catch((err: unknown) => {
      const message = err instanceof Error ? err.message : String(err);
      warn(`shadow API proxy: ${message}`);
      if (!res.headersSent) sendJson(res, 502, statusBody(502, 'BadGateway', message));
      else res.destroy();
    });
  });
  server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
    const path = parseApiPath(new URL(req.url ?? '/', 'http://shadow').pathname);
    // http-proxy carries WebSocket upgrades only; SPDY clients (older kubectl) fall back to WebSocket or stop here.
    const notWebSocket = `devop --shadow forwards WebSocket upgrades only, not ${req.headers.upgrade}`;
    const refusal = !authorized(req)
      ? statusBody(401, 'Unauthorized', 'Unauthorized')
      : path?.subresource && EXEC_SUBRESOURCES.has(path.subresource)
        ? statusBody(403, 'Forbidden', shadowRefusal(`pods/${path.subresource}`))
        : req.headers.upgrade?.toLowerCase() !== 'websocket'
          ? statusBody(400, 'BadRequest', notWebSocket)
          : undefined;
    if (refusal) {
      const text = JSON.stringify(refusal);
      const reason = { 400: 'Bad Request', 401: 'Unauthorized', 403: 'Forbidden' }[refusal.code as number];
      socket.end(
        `HTTP/1.1 ${refusal.code} ${reason}\r\nContent-Type: application/json\r\n` +
          `Content-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`,
      );
      return;
    }
    asUser(req).then(
      () => proxy.ws(req, socket, head),
      () => socket.destroy(),
    );
  });
  // Keep-alive clients (client-go, kubectl) hold idle connections; close() must not wait for them.
  const sockets = new Set<Socket>();
  server.on('secureConnection', (socket: Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `https://127.0.0.1:${port}`,
    port,
    caPem: cert.cert,
    token,
    close: async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const socket of sockets) socket.destroy();
      await closed;
      proxy.close();
      agent.destroy();
    },
  };
}

/**
 * The user's TLS material and credentials (token, exec plugin, basic auth) into `opts`. For a plain http:// server
 * client-node's public applyToHTTPSOptions refuses (it builds an https agent); its applyOptions, private in its types,
 * is the same without the agent (as kube/config.ts reaches createAgent).
 */
async function applyUser(kc: KubeConfig, upstream: URL, opts: object): Promise<void> {
  if (upstream.protocol !== 'http:') return kc.applyToHTTPSOptions(opts);
  const user = kc.getCurrentUser();
  await (kc as unknown as { applyOptions(o: object): Promise<void> }).applyOptions(opts);
  if (user?.username) (opts as { auth?: string }).auth = `${user.username}:${user.password}`;
}

/** Sends a write with dryRun=All, answers the local command with the API server's answer, and reports it. */
async function forwardWrite(
  req: IncomingMessage,
  res: ServerResponse,
  w: {
    url: URL;
    path: ApiPath | undefined;
    verb: string;
    upstream: URL;
    agent: HttpAgent;
    headers: Record<string, string>;
    options: ShadowProxyOptions;
  },
): Promise<void> {
  const body = await readBody(req);
  if (body === undefined)
    return sendJson(res, 413, statusBody(413, 'RequestEntityTooLarge', 'Request entity too large: limit is 3145728'));
  const target = upstreamUrl(w.upstream, w.url.pathname + w.url.search);
  target.searchParams.delete('dryRun');
  target.searchParams.append('dryRun', 'All');
  const headers: Record<string, string> = { ...w.headers };
  for (const name of FORWARDED_HEADERS) {
    const value = req.headers[name];
    if (typeof value === 'string') headers[name] = value;
  }
  delete headers['accept-encoding'];
  const named = w.path?.name !== undefined;
  // The object before the write: what the diff is made against (the object itself, not its subresource).
  const objectPath =
    w.path && named ? w.url.pathname.split('/').slice(0, subresourceCut(w.url.pathname)).join('/') : '';
  const [before, answer] = await Promise.all([
    named
      ? send(upstreamUrl(w.upstream, objectPath), 'GET', { ...w.headers, accept: 'application/json' }, w.agent)
      : undefined,
    send(target, req.method ?? 'POST', headers, w.agent, body),
  ]);
  res.writeHead(answer.status, pickHeaders(answer.headers, ['content-type', 'content-encoding', 'warning']));
  res.end(answer.body);

  const beforeObject = before ? (before.status === 404 ? null : parseJson(before)) : null;
  const answerObject = parseJson(answer);
  const ok = answer.status < 400;
  const isStatus = (answerObject as KubeObject | undefined)?.kind === 'Status';
  const verb = w.verb === 'delete' && !named ? 'deletecollection' : w.verb;
  const after = !ok ? undefined : verb === 'delete' && isStatus ? null : answerObject;
  w.options.onWrite({
    verb,
    kind: kindOf(after) ?? kindOf(beforeObject) ?? w.path?.resource ?? w.url.pathname,
    resource: w.path?.resource ?? w.url.pathname,
    ...(w.path?.subresource ? { subresource: w.path.subresource } : {}),
    ...(w.path?.namespace ? { namespace: w.path.namespace } : {}),
    ...(nameOf(w.path, after, body) ? { name: nameOf(w.path, after, body) } : {}),
    status: answer.status,
    result: ok ? 'dry-run' : 'refused',
    ...(!ok ? { message: (answerObject as { message?: string } | undefined)?.message ?? `HTTP ${answer.status}` } : {}),
    ...(before ? { before: beforeObject } : { before: verb === 'create' ? null : undefined }),
    ...(after !== undefined ? { after } : {}),
  });
}

async function answerLease(
  req: IncomingMessage,
  res: ServerResponse,
  path: ApiPath,
  leases: LeaseMemory,
  options: ShadowProxyOptions,
): Promise<void> {
  const raw = await readBody(req);
  let body: KubeObject | undefined;
  try {
    body = raw && raw.length > 0 ? (JSON.parse(raw.toString('utf8')) as KubeObject) : undefined;
  } catch (err) {
    return sendJson(
      res,
      400,
      statusBody(400, 'BadRequest', `the body could not be decoded: ${(err as Error).message}`),
    );
  }
  const method = req.method ?? 'GET';
  const answer = leases.handle({
    method,
    apiVersion: `${path.group}/${path.version}`,
    namespace: path.namespace ?? 'default',
    name: path.name,
    body,
    contentType: req.headers['content-type'],
  });
  sendJson(res, answer.status, answer.body);
  const change = answer.change;
  // Renewals of the same holder are not news: a row per acquisition, hand-over or release, not one every 2 s.
  if (!change || holder(change.before) === holder(change.after)) return;
  options.onWrite({
    verb: WRITE_VERBS[method] ?? method.toLowerCase(),
    kind: 'Lease',
    resource: 'leases',
    namespace: path.namespace,
    name: (change.after ?? change.before)?.metadata?.name,
    status: answer.status,
    result: 'in memory',
    before: change.before,
    after: change.after,
  });
}

function holder(lease: KubeObject | null): unknown {
  return lease ? ((lease.spec as { holderIdentity?: unknown } | undefined)?.holderIdentity ?? '') : null;
}

/** A path of the API under the server's URL, which may have a path of its own. */
function upstreamUrl(upstream: URL, path: string): URL {
  return new URL(`${upstream.origin}${upstream.pathname.replace(/\/$/, '')}${path}`);
}

/** The index where a named object's path ends (its subresource, if any, follows). */
function subresourceCut(pathname: string): number {
  const parts = pathname.split('/');
  const path = parseApiPath(pathname);
  return path?.subresource ? parts.length - 1 : parts.length;
}

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

function send(
  url: URL,
  method: string,
  headers: Record<string, string>,
  agent: HttpAgent,
  body?: Buffer,
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const request = url.protocol === 'http:' ? httpRequest : httpsRequest;
    const req = request(url, { method, headers, agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 502, headers: res.headers, body: Buffer.concat(chunks) }),
      );
      res.on('error', reject);
    });
    req.setTimeout(WRITE_TIMEOUT_MS, () =>
      req.destroy(
        new Error(`the API server did not answer ${method} ${url.pathname} within ${WRITE_TIMEOUT_MS / 1000} s`),
      ),
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** The body, or undefined when it is larger than MAX_WRITE_BODY. */
async function readBody(req: IncomingMessage): Promise<Buffer | undefined> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_WRITE_BODY) return undefined;
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

function parseJson(answer: Answer): unknown {
  if (!String(answer.headers['content-type'] ?? '').includes('json')) return undefined;
  try {
    return JSON.parse(answer.body.toString('utf8'));
  } catch {
    // Not JSON after all (a proxy's error page): the event then has no object.
    return undefined;
  }
}

function kindOf(o: unknown): string | undefined {
  const kind = (o as KubeObject | null | undefined)?.kind;
  return kind && kind !== 'Status' ? kind : undefined;
}

function nameOf(path: ApiPath | undefined, after: unknown, body: Buffer): string | undefined {
  if (path?.name) return path.name;
  const fromAfter = (after as KubeObject | null | undefined)?.metadata?.name;
  if (fromAfter) return fromAfter;
  try {
    return (JSON.parse(body.toString('utf8')) as KubeObject).metadata?.name;
  } catch {
    // A body that is not JSON (protobuf, YAML) names nothing we can read; the row shows the resource only.
    return undefined;
  }
}

function shadowRefusal(what: string): string {
  return `devop --shadow does not forward ${what}: it would run a command in the cluster's container`;
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

function pick(from: Record<string, unknown>, keys: string[]): Record<string, unknown> {
  return Object.fromEntries(keys.filter((k) => from[k] !== undefined).map((k) => [k, from[k]]));
}

function pickHeaders(from: Answer['headers'], keys: string[]): Record<string, string | string[]> {
  return Object.fromEntries(keys.filter((k) => from[k] !== undefined).map((k) => [k, from[k] as string | string[]]));
}

function lowerKeys(headers: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v]));
}
