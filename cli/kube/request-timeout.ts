// Bounds every wait on the API server with one timeout (--request-timeout, kubectl's flag and syntax), set once on the
// KubeConfig: each request of every API client it makes, the connect of each watch, the WebSocket upgrade of each
// port-forward. A request that runs out of time fails with an ApiTimeoutError naming the server and the fix.
import type { Agent } from 'node:http';
import {
  IsomorphicFetchHttpLibrary,
  KubeConfig,
  Observable,
  ResponseContext,
  ServerConfiguration,
  Watch,
  createConfiguration,
  type ApiConstructor,
  type ApiType,
  type HttpLibrary,
  type RequestContext,
} from '@kubernetes/client-node';
import { parseRequestTimeout } from '../config/duration.js';
import { OPTIONS } from '../config/options.js';
import { ApiTimeoutError, formatTimeout } from './api-timeout.js';

// Read with the one duration parser (cli/config/duration.ts); the API callers take it from here.
export { parseRequestTimeout };
// The timeout's error lives apart from client-node (./api-timeout.ts); the API callers take it from here too.
export { ApiTimeoutError, formatTimeout };

/** For callers without a config (devop ls): the table's requestTimeout default (why that long: options.ts). */
export const DEFAULT_REQUEST_TIMEOUT_MS = parseRequestTimeout(OPTIONS.requestTimeout.unsetDefault, 'requestTimeout');

const REQUEST_TIMEOUT = Symbol('devop.requestTimeoutMs');
type BoundedKubeConfig = KubeConfig & { [REQUEST_TIMEOUT]?: number };

/** The timeout bound to this KubeConfig by boundRequests (0: none). */
export function requestTimeoutOf(kc: KubeConfig): number {
  return (kc as BoundedKubeConfig)[REQUEST_TIMEOUT] ?? 0;
}

/**
 * Makes every API client `kc.makeApiClient` returns fail a request after `timeoutMs` (its answer's body included), and
 * every WebSocket upgrade (port-forward) too. 0 leaves the KubeConfig as it is (kubectl: 0 = no timeout).
 */
export function boundRequests(kc: KubeConfig, timeoutMs: number): void {
  if (timeoutMs <= 0) return;
  const bounded = kc as BoundedKubeConfig;
  bounded[REQUEST_TIMEOUT] = timeoutMs;
  // client-node's own makeApiClient, with one change: the HTTP library (its `httpApi` hook) bounds each call.
  bounded.makeApiClient = <T extends ApiType>(apiClientType: ApiConstructor<T>): T => {
    const cluster = kc.getCurrentCluster();
    if (!cluster) throw new Error('No active cluster!');
    return new apiClientType(
      createConfiguration({
        baseServer: new ServerConfiguration(cluster.server, {}),
        authMethods: { default: kc },
        httpApi: new BoundedHttpLibrary(cluster.server, timeoutMs),
      }),
    );
  };
  // PortForward (and Exec, Attach) open their WebSocket with these options: `ws` fails an upgrade that takes longer.
  // Called with `this`, not bound: startWatch hands out a KubeConfig that delegates to this one but for createAgent.
  const applyToHTTPSOptions = kc.applyToHTTPSOptions;
  bounded.applyToHTTPSOptions = async function (this: KubeConfig, opts) {
    await applyToHTTPSOptions.call(this, opts);
    (opts as { handshakeTimeout?: number }).handshakeTimeout = timeoutMs;
  };
}

/** True for the error `ws` reports when the upgrade did not complete within handshakeTimeout. */
export function isHandshakeTimeout(err: unknown): boolean {
  const message = (err as { message?: unknown } | null)?.message;
  return typeof message === 'string' && message.includes('Opening handshake has timed out');
}

/** client-node's fetch library with a deadline per request, from sending it to reading the answer's body. */
class BoundedHttpLibrary implements HttpLibrary {
  private readonly fetch = new IsomorphicFetchHttpLibrary();

  constructor(
    private readonly server: string,
    private readonly timeoutMs: number,
  ) {}

  send(request: RequestContext): Observable<ResponseContext> {
    const deadline = new AbortController();
    // Unref'd: the request's own socket keeps devop alive while it waits; an answer whose body nobody reads must not.
    const timer = setTimeout(() => deadline.abort(), this.timeoutMs).unref();
    const callerSignal = request.getSignal();
    request.setSignal(callerSignal ? AbortSignal.any([callerSignal, deadline.signal]) : deadline.signal);
    const settle = <T>(pending: Promise<T>, last: boolean): Promise<T> =>
      pending.then(
        (value) => {
          if (last) clearTimeout(timer);
          return value;
        },
        (err: unknown) => {
          clearTimeout(timer);
          const timedOut = deadline.signal.aborted && !callerSignal?.aborted;
          throw timedOut ? new ApiTimeoutError(this.server, this.timeoutMs) : err;
        },
      );
    const answer = settle(this.fetch.send(request).toPromise(), false).then(
      (response) =>
        new ResponseContext(response.httpStatusCode, response.headers, {
          text: () => settle(response.body.text(), true),
          binary: () => settle(response.body.binary(), true),
        }),
    );
    return new Observable(answer);
  }
}

/** client-node's Watch callback: the event type, the object, the whole event. */
export type WatchEventHandler = Parameters<Watch['watch']>[2];

/**
 * client-node's Watch, with its connect bounded by the KubeConfig's request timeout: if the response headers do not
 * arrive in time, `done` gets an ApiTimeoutError. Once they have arrived the stream is not bounded — a watch with no
 * event for minutes is normal. Resolves with the controller that stops the watch.
 */
export async function startWatch(
  kc: KubeConfig,
  path: string,
  params: Parameters<Watch['watch']>[1],
  onEvent: WatchEventHandler,
  done: (err: unknown) => void,
): Promise<AbortController> {
  const timeoutMs = requestTimeoutOf(kc);
  if (timeoutMs <= 0) return new Watch(kc).watch(path, params, onEvent, done);
  // client-node's Watch gives no handle on its request before the headers arrive (and 1.4 drops its own 30 s signal),
  // so this watch gets an HTTP agent of its own — a KubeConfig that delegates to kc but for createAgent — and a connect
  // that runs out of time is cut by destroying that agent.
  let agent: Agent | undefined;
  const ownAgent = (cluster: unknown, options: unknown): Agent => {
    const create = (KubeConfig.prototype as unknown as { createAgent(c: unknown, o: unknown): Agent }).createAgent;
    agent = create.call(kc, cluster, options);
    return agent;
  };
  const config = Object.create(kc, { createAgent: { value: ownAgent } }) as KubeConfig;
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    agent?.destroy();
  }, timeoutMs);
  const server = kc.getCurrentCluster()?.server ?? 'the API server';
  try {
    return await new Watch(config).watch(path, params, onEvent, (err: unknown) =>
      done(timedOut ? new ApiTimeoutError(server, timeoutMs, { action: `watch ${path}` }) : err),
    );
  } finally {
    clearTimeout(timer);
  }
}
