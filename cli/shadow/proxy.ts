// The shadow API proxy of `devop exec --shadow`: a local HTTP server that the local command's kubeconfig points at.
// Reads and watches pass through to the real API server with the user's credentials, streamed (forward.ts,
// WebSocket watches too); every write goes out as a dry run (dryRun=All in the query, and in the DeleteOptions
// body of a DELETE), so the cluster validates, defaults and admits it and stores nothing; Leases are answered from
// memory (leases.ts); a request that no dry run covers is refused (policy.ts). Each write is reported.
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import { Agent, createServer, request as httpsRequest, type AgentOptions } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import type { KubeConfig } from '@kubernetes/client-node';
import { errorMessage } from '../../shared/errors.js';
import { makeSessionCert } from '../process/session-cert.js';
import type { ShadowWrite } from '../reporter.js';
import { forwardRead, forwardUpgrade } from './forward.js';
import { LeaseMemory, statusBody, type KubeObject } from './leases.js';
import { dryRunDeleteBody, routeRequest, WRITE_VERBS, type ApiPath, type ShadowRoute } from './policy.js';

export { isReview, parseApiPath, type ApiPath } from './policy.js';

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

/** kube-apiserver's own limit on a request (--request-timeout's default): a write still unanswered then has failed. */
const WRITE_TIMEOUT_MS = 60_000;
/** Largest write body the proxy reads (kube-apiserver's own limit is 3 MiB). */
const MAX_WRITE_BODY = 3 * 1024 * 1024;
/** Headers of the local command's request that go with a write (the rest are the proxy's business). */
const FORWARDED_HEADERS = ['content-type', 'accept', 'user-agent', 'accept-encoding'];

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
  const warned = new Set<string>();
  const warn = (message: string): void => {
    if (warned.has(message)) return;
    warned.add(message);
    options.onWarning?.(message);
  };
  /** The user's credentials for one upstream request (exec plugins may refresh a token between requests). */
  const userHeaders = async (): Promise<Record<string, string>> => {
    const opts: { headers?: Record<string, string>; auth?: string } = {};
    await applyUser(kc, upstream, opts);
    const headers = { ...(opts.headers ?? {}) };
    if (opts.auth) headers.Authorization = `Basic ${Buffer.from(opts.auth).toString('base64')}`;
    return headers;
  };
  const routeOf = (req: IncomingMessage): ShadowRoute =>
    routeRequest(req.method ?? 'GET', (req.url ?? '/').split('?')[0], req.headers);
  const authorized = (req: IncomingMessage): boolean => {
    const given = Buffer.from(req.headers.authorization ?? '');
    const wanted = Buffer.from(`Bearer ${token}`);
    return given.length === wanted.length && timingSafeEqual(given, wanted);
  };
  /** Where a read goes: the same path and query under the server's URL (which may have a path of its own). */
  const readUpstream = async (req: IncomingMessage) => ({
    url: upstreamUrl(upstream, req.url ?? '/'),
    agent,
    credentials: await userHeaders(),
  });
  const upstreamError = (err: Error): void => warn(`shadow API proxy: ${err.message}`);

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    if (!authorized(req)) return sendJson(res, 401, statusBody(401, 'Unauthorized', 'Unauthorized'));
    const route = routeOf(req);
    switch (route.kind) {
      case 'refuse':
        req.resume();
        warn(route.message);
        return sendJson(res, route.code, statusBody(route.code, route.reason, route.message));
      case 'lease':
        return answerLease(req, res, route.path, leases, options);
      case 'write':
        return forwardWrite(req, res, {
          target: req.url ?? '/',
          route,
          upstream,
          agent,
          headers: await userHeaders(),
          options,
        });
      case 'review':
        return forwardReview(req, res, upstreamUrl(upstream, req.url ?? '/'), agent, await userHeaders());
      default:
        forwardRead(req, res, await readUpstream(req), (err) => {
          upstreamError(err);
          if (!res.headersSent) sendJson(res, 502, statusBody(502, 'BadGateway', err.message));
          else res.destroy();
        });
    }
  };

  const cert = makeSessionCert('devop shadow API proxy');
  const server = createServer(cert, (req, res) => {
    handle(req, res).catch((err: unknown) => {
      const message = errorMessage(err);
      warn(`shadow API proxy: ${message}`);
      if (!res.headersSent) sendJson(res, 502, statusBody(502, 'BadGateway', message));
      else res.destroy();
    });
  });
  server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
    const route = routeOf(req);
    // WebSocket upgrades only; SPDY clients (older kubectl) fall back to WebSocket or stop here.
    // A WebSocket is a read (a watch) or it is refused: exec, attach, portforward and proxy are refused by route.
    const notWebSocket = `devop --shadow forwards WebSocket upgrades only, not ${req.headers.upgrade}`;
    const notRead = `devop --shadow forwards WebSocket watches only (GET), not ${req.method}`;
    const refusal = !authorized(req)
      ? statusBody(401, 'Unauthorized', 'Unauthorized')
      : route.kind === 'refuse'
        ? statusBody(route.code, route.reason, route.message)
        : req.headers.upgrade?.toLowerCase() !== 'websocket'
          ? statusBody(400, 'BadRequest', notWebSocket)
          : route.kind !== 'read' || req.method !== 'GET'
            ? statusBody(403, 'Forbidden', notRead)
            : undefined;
    if (refusal) {
      if (route.kind === 'refuse') warn(route.message);
      const text = JSON.stringify(refusal);
      const reason = { 400: 'Bad Request', 401: 'Unauthorized', 403: 'Forbidden' }[refusal.code as number];
      socket.end(
        `HTTP/1.1 ${refusal.code} ${reason}\r\nContent-Type: application/json\r\n` +
          `Content-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`,
      );
      return;
    }
    readUpstream(req).then(
      (to) => forwardUpgrade(req, socket, head, to, upstreamError),
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
    /** The request target as the client sent it (the path was checked by routeRequest as it is). */
    target: string;
    route: { verb: string; path: ApiPath };
    upstream: URL;
    agent: HttpAgent;
    headers: Record<string, string>;
    options: ShadowProxyOptions;
  },
): Promise<void> {
  const given = await readBody(req);
  if (given === undefined)
    return sendJson(res, 413, statusBody(413, 'RequestEntityTooLarge', 'Request entity too large: limit is 3145728'));
  const [rawPath, ...rawQuery] = w.target.split('?');
  // Every write carries dryRun=All in the query (create, update and patch read their options only there:
  // handlers/create.go, update.go, patch.go), whatever the client put there (dryRun=Bogus is not a real write).
  const query = new URLSearchParams(rawQuery.join('?'));
  query.delete('dryRun');
  query.append('dryRun', 'All');
  const target = upstreamUrl(w.upstream, `${rawPath}?${query}`);
  const headers: Record<string, string> = { ...w.headers };
  for (const name of FORWARDED_HEADERS) {
    const value = req.headers[name];
    if (typeof value === 'string') headers[name] = value;
  }
  delete headers['accept-encoding'];
  let body = given;
  if (req.method === 'DELETE') {
    // A DELETE's options come from its body when it has one (handlers/delete.go): the dry run goes there, always.
    const rewritten = dryRunDeleteBody(req.headers['content-type'], given, query);
    if (!('body' in rewritten)) {
      w.options.onWarning?.(rewritten.message);
      return sendJson(res, rewritten.code, statusBody(rewritten.code, rewritten.reason, rewritten.message));
    }
    body = rewritten.body;
    headers['content-type'] = 'application/json';
  }
  const path = w.route.path;
  const named = path.name !== undefined;
  // The object before the write: what the diff is made against (the object itself, not its subresource).
  const objectPath = named
    ? rawPath
        .split('/')
        .slice(0, path.subresource ? -1 : undefined)
        .join('/')
    : '';
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
  const verb = w.route.verb;
  const after = !ok ? undefined : verb === 'delete' && isStatus ? null : answerObject;
  const name = nameOf(path, after, given);
  w.options.onWrite({
    verb,
    kind: kindOf(after) ?? kindOf(beforeObject) ?? path.resource,
    resource: path.resource,
    ...(path.subresource ? { subresource: path.subresource } : {}),
    ...(path.namespace ? { namespace: path.namespace } : {}),
    ...(name ? { name } : {}),
    status: answer.status,
    result: ok ? 'dry-run' : 'refused',
    ...(!ok ? { message: (answerObject as { message?: string } | undefined)?.message ?? `HTTP ${answer.status}` } : {}),
    ...(before ? { before: beforeObject } : { before: verb === 'create' ? null : undefined }),
    ...(after !== undefined ? { after } : {}),
  });
}

/** An access or token review goes as it is (it only answers), its body announced; the answer comes back. */
async function forwardReview(
  req: IncomingMessage,
  res: ServerResponse,
  target: URL,
  agent: HttpAgent,
  credentials: Record<string, string>,
): Promise<void> {
  const body = await readBody(req);
  if (body === undefined)
    return sendJson(res, 413, statusBody(413, 'RequestEntityTooLarge', 'Request entity too large: limit is 3145728'));
  const headers: Record<string, string> = { ...credentials };
  for (const name of FORWARDED_HEADERS) {
    const value = req.headers[name];
    if (typeof value === 'string' && name !== 'accept-encoding') headers[name] = value;
  }
  const answer = await send(target, 'POST', headers, agent, body);
  res.writeHead(answer.status, pickHeaders(answer.headers, ['content-type', 'warning']));
  res.end(answer.body);
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
    // The body is announced: Node sends a DELETE's body with neither Content-Length nor chunked encoding otherwise,
    // and the server reads its bytes as the next request.
    const announced = body ? { ...headers, 'content-length': String(body.length) } : headers;
    const req = request(url, { method, headers: announced, agent }, (res) => {
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

function nameOf(path: ApiPath, after: unknown, body: Buffer): string | undefined {
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
