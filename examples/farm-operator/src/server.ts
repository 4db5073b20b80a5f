// The farm-operator's HTTPS server: routes the aggregator's requests (discovery, llamas, farmpods, openapi, health).
import { createServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  FARMPODS,
  GROUP,
  GROUP_VERSION,
  LLAMAS,
  OPENAPI_V3_PATH,
  apiGroup,
  apiGroupList,
  apiResourceList,
  methodNotAllowed,
  notFound,
  openApiV2,
  openApiV3,
  openApiV3Index,
  pathNotFound,
  resourcesOf,
  status,
  table,
  tableVersionAccepted,
  type StatusError,
  type Step,
  type TableColumn,
} from './api.js';
import { toFarmPodList, type FarmPod, type PodLister } from './farmpods.js';
import type { Llama, LlamaStore } from './llamas.js';

export interface FarmHandlerOptions {
  step: Step;
  llamas: LlamaStore;
  /** Asked for only when a FarmPod request arrives, so steps 1 and 2 never need a Kubernetes client. */
  pods: () => PodLister;
  /** One line per request; the walkthrough watches it to see who answers. */
  log?: (line: string) => void;
}

export interface FarmServerOptions extends FarmHandlerOptions {
  tls: { key: string; cert: string };
  port: number;
  host?: string;
}

export interface RunningFarmServer {
  server: Server;
  port: number;
  close(): Promise<void>;
}

const RESOURCE_PATH = new RegExp(
  `^/apis/${GROUP.replace(/\./g, '\\.')}/v1alpha(?:/namespaces/([^/]+))?/([^/]+)(?:/([^/]+))?$`,
);

const llamaColumns: TableColumn<Llama>[] = [
  { name: 'Weight', type: 'integer', description: 'Weight in kg', cell: (l) => l.spec.weight },
  { name: 'Height', type: 'integer', description: 'Height in cm', cell: (l) => l.spec.height },
];
const farmPodColumns: TableColumn<FarmPod>[] = [
  {
    name: 'Containers',
    type: 'integer',
    description: 'Number of containers in the pod',
    cell: (p) => p.spec.containers,
  },
];

class HttpError extends Error {
  constructor(readonly status: StatusError) {
    super(status.message);
  }
}

function sendJson(res: ServerResponse, code: number, body: object): void {
  const text = JSON.stringify(body);
  res.writeHead(code, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

function podListFailure(err: unknown): StatusError {
  const code = (err as { code?: unknown }).code;
  const message = err instanceof Error ? err.message.split('\n')[0] : String(err);
  if (code === 403) {
    return {
      code: 403,
      reason: 'Forbidden',
      message: `farm-operator may not list pods (grant it pods list in its ClusterRole): ${message}`,
    };
  }
  return { code: 503, reason: 'ServiceUnavailable', message: `listing pods failed: ${message}` };
}

async function serveResource(
  options: FarmHandlerOptions,
  req: IncomingMessage,
  url: URL,
  match: RegExpExecArray,
): Promise<[number, object]> {
  const [, namespace, resource, name] = match;
  const served = resourcesOf(options.step).find((r) => r.name === resource);
  if (!served) throw new HttpError(pathNotFound(url.pathname));
  if (req.method !== 'GET') throw new HttpError(methodNotAllowed(req.method ?? '?', resource));
  const watch = url.searchParams.get('watch');
  if (watch === 'true' || watch === '1') throw new HttpError(methodNotAllowed('watch', resource));
  const tableVersion = tableVersionAccepted(req.headers.accept);
  const includeObject = url.searchParams.get('includeObject');

  if (served === LLAMAS) {
    if (name !== undefined) {
      if (namespace === undefined) throw new HttpError(pathNotFound(url.pathname));
      const llama = options.llamas.get(namespace, name);
      if (!llama) throw new HttpError(notFound(resource, name));
      return [200, tableVersion ? table(tableVersion, llamaColumns, [llama], {}, includeObject) : llama];
    }
    const list = options.llamas.list(namespace);
    return [200, tableVersion ? table(tableVersion, llamaColumns, list.items, list.metadata, includeObject) : list];
  }

  if (served === FARMPODS) {
    if (name !== undefined) throw new HttpError(methodNotAllowed('get', resource));
    const limit = Number(url.searchParams.get('limit') ?? '');
    const page = await options
      .pods()
      .list(namespace, {
        ...(Number.isInteger(limit) && limit > 0 ? { limit } : {}),
        ...(url.searchParams.get('continue') ? { continue: url.searchParams.get('continue') as string } : {}),
        ...(url.searchParams.get('labelSelector')
          ? { labelSelector: url.searchParams.get('labelSelector') as string }
          : {}),
      })
      .catch((err: unknown) => {
        throw new HttpError(podListFailure(err));
      });
    const list = toFarmPodList(page);
    return [200, tableVersion ? table(tableVersion, farmPodColumns, list.items, list.metadata, includeObject) : list];
  }
  throw new HttpError(pathNotFound(url.pathname));
}

async function route(options: FarmHandlerOptions, req: IncomingMessage, url: URL): Promise<[number, object | string]> {
  const path = url.pathname.replace(/\/+$/, '') || '/';
  switch (path) {
    case '/healthz':
    case '/readyz':
    case '/livez':
      return [200, 'ok'];
    case '/apis':
      return [200, apiGroupList()];
    case `/apis/${GROUP}`:
      return [200, apiGroup()];
    case `/apis/${GROUP_VERSION}`:
      return [200, apiResourceList(options.step)];
    case '/openapi/v2':
      return [200, openApiV2(options.step)];
    case '/openapi/v3':
      return [200, openApiV3Index(options.step)];
    case OPENAPI_V3_PATH:
      return [200, openApiV3(options.step)];
  }
  const match = RESOURCE_PATH.exec(path);
  if (match) return serveResource(options, req, url, match);
  throw new HttpError(pathNotFound(path));
}

/** The request handler alone (no TLS), so it can be mounted on any server. */
export function createFarmHandler(options: FarmHandlerOptions): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    const started = Date.now();
    const url = new URL(req.url ?? '/', 'https://farm-operator');
    const done = (code: number): void =>
      options.log?.(
        `step=${options.step} ${req.method} ${url.pathname}${url.search} ${code} ${Date.now() - started}ms`,
      );
    route(options, req, url)
      .then(([code, body]) => {
        if (typeof body === 'string') {
          res.writeHead(code, { 'Content-Type': 'text/plain' });
          res.end(body);
        } else {
          sendJson(res, code, body);
        }
        done(code);
      })
      .catch((err: unknown) => {
        const failure: StatusError =
          err instanceof HttpError ? err.status : { code: 500, reason: 'InternalError', message: String(err) };
        sendJson(res, failure.code, status(failure));
        done(failure.code);
      });
  };
}

/** Starts the HTTPS server; resolves once it listens (port 0 picks a free port). */
export async function startFarmServer(options: FarmServerOptions): Promise<RunningFarmServer> {
  const server = createServer({ key: options.tls.key, cert: options.tls.cert }, createFarmHandler(options));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host ?? '0.0.0.0', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  return {
    server,
    port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
