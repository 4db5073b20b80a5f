// --request-timeout: kubectl's syntax, the 30 s default, and that every kind of wait on the API server is bounded —
// a request (headers and body), a watch's connect (but not an idle watch), a port-forward upgrade — against real
// servers on loopback that complete the TLS handshake and then do not answer.
import { CoreV1Api } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRoutedApiServer, startStalledApiServer, type FakeApiServer } from '../../testkit/stalled-api.js';
import { isUserError } from '../../shared/errors.js';
import { loadKubeConfig } from './config.js';
import { apiCall } from './errors.js';
import {
  ApiTimeoutError,
  DEFAULT_REQUEST_TIMEOUT_MS,
  formatTimeout,
  parseRequestTimeout,
  requestTimeoutOf,
  startWatch,
} from './request-timeout.js';
import { openPortForward } from './tunnel.js';
import { informPods, type PodInformer } from './pod-informer.js';
import { waitForPods } from './watch.js';

const TIMEOUT = '300ms';
const TIMEOUT_MS = 300;
/** Generous upper bound for "failed bounded" on a loaded 2-core machine; without the bound these calls never end. */
const BOUND_MS = 5_000;

async function timed<T>(run: () => Promise<T>): Promise<{ ms: number; error: unknown }> {
  const started = Date.now();
  try {
    await run();
    return { ms: Date.now() - started, error: undefined };
  } catch (error) {
    return { ms: Date.now() - started, error };
  }
}

describe('--request-timeout values', () => {
  it('reads kubectl syntax: seconds, or a duration with units; 0 = no limit', () => {
    expect(parseRequestTimeout('10')).toBe(10_000);
    expect(parseRequestTimeout('10s')).toBe(10_000);
    expect(parseRequestTimeout('1m')).toBe(60_000);
    expect(parseRequestTimeout('1m30s')).toBe(90_000);
    expect(parseRequestTimeout('500ms')).toBe(500);
    expect(parseRequestTimeout('1.5s')).toBe(1_500);
    expect(parseRequestTimeout('1h')).toBe(3_600_000);
    expect(parseRequestTimeout('0')).toBe(0);
    expect(parseRequestTimeout(0)).toBe(0);
  });

  it('rejects anything else in one line naming the flag and the syntax', () => {
    for (const bad of ['abc', '-1', '10x', '', 's', '1 m']) {
      let error: unknown;
      try {
        parseRequestTimeout(bad);
      } catch (err) {
        error = err;
      }
      expect(isUserError(error), bad).toBe(true);
      expect((error as Error).message).toBe(
        `invalid --request-timeout "${bad.trim()}": not a number of seconds or a duration`,
      );
    }
  });

  it('formats a timeout for a message', () => {
    expect(formatTimeout(2_000)).toBe('2 s');
    expect(formatTimeout(1_500)).toBe('1.5 s');
    expect(formatTimeout(300)).toBe('300 ms');
    expect(formatTimeout(30_000)).toBe('30 s');
    expect(formatTimeout(300_000)).toBe('5 m');
  });
});

describe('requests to an API server that does not answer', () => {
  let stalled: FakeApiServer;
  let routed: FakeApiServer;
  let retryWatches = 0;

  beforeAll(async () => {
    stalled = await startStalledApiServer();
    routed = await startRoutedApiServer((req, res) => {
      const url = new URL(req.url ?? '/', 'https://x');
      if (url.pathname === '/api/v1/namespaces/slow-body/pods') {
        // Headers and half a body, then nothing.
        res.writeHead(200, { 'content-type': 'application/json' });
        res.write('{"kind":"PodList","items":[');
        return;
      }
      if (url.searchParams.get('watch') === 'true') {
        if (url.pathname.includes('/namespaces/retry/') && ++retryWatches > 1) {
          // The second watch connects and reports a pod.
          const metadata = { name: 'p1', namespace: 'retry', resourceVersion: '8' };
          const pod = { kind: 'Pod', apiVersion: 'v1', metadata };
          res.writeHead(200, { 'content-type': 'application/json' });
          res.write(`${JSON.stringify({ type: 'ADDED', object: pod })}\n`);
          return;
        }
        if (url.pathname.includes('/namespaces/idle/')) {
          // An established watch on which nothing happens: headers, then silence (chunked, never ended).
          res.writeHead(200, { 'content-type': 'application/json' });
          res.flushHeaders();
        }
        return; // any other watch: no answer at all
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ kind: 'PodList', apiVersion: 'v1', metadata: { resourceVersion: '7' }, items: [] }));
    });
  });

  afterAll(async () => {
    await stalled?.close();
    await routed?.close();
  });

  it('binds the 30 s default when no timeout is given, and none for 0', () => {
    expect(DEFAULT_REQUEST_TIMEOUT_MS).toBeLessThanOrEqual(30_000);
    const timeoutOf = (requestTimeout?: string): number =>
      requestTimeoutOf(loadKubeConfig({ kubeconfig: stalled.kubeconfigPath, requestTimeout }).kc);
    expect(timeoutOf()).toBe(DEFAULT_REQUEST_TIMEOUT_MS);
    expect(timeoutOf('0')).toBe(0);
    expect(timeoutOf('2s')).toBe(2_000);
    expect(() => timeoutOf('soon')).toThrow('invalid --request-timeout "soon"');
  });

  it('fails an API call whose answer never comes, naming the server, the action and the fix', async () => {
    const { kc } = loadKubeConfig({ kubeconfig: stalled.kubeconfigPath, requestTimeout: TIMEOUT });
    const core = kc.makeApiClient(CoreV1Api);
    const { ms, error } = await timed(() =>
      apiCall({ action: 'list pods', verb: 'list', resource: 'pods' }, () =>
        core.listNamespacedPod({ namespace: 'default' }),
      ),
    );
    expect(error).toBeInstanceOf(ApiTimeoutError);
    expect((error as Error).message).toBe(
      `the API server ${stalled.url} did not answer within 300 ms (while trying to list pods)`,
    );
    expect((error as ApiTimeoutError).hint).toBe(
      'check that the cluster is reachable (kubectl cluster-info), or raise --request-timeout',
    );
    expect(ms).toBeGreaterThanOrEqual(TIMEOUT_MS - 20);
    expect(ms).toBeLessThan(BOUND_MS);
  });

  it('fails an API call whose answer stops halfway through its body', async () => {
    const { kc } = loadKubeConfig({ kubeconfig: routed.kubeconfigPath, requestTimeout: TIMEOUT });
    const { ms, error } = await timed(() => kc.makeApiClient(CoreV1Api).listNamespacedPod({ namespace: 'slow-body' }));
    expect(error).toBeInstanceOf(ApiTimeoutError);
    expect(ms).toBeLessThan(BOUND_MS);
  });

  it('does not fail calls that are answered in time (the timer does not outlive them)', async () => {
    const { kc } = loadKubeConfig({ kubeconfig: routed.kubeconfigPath, requestTimeout: TIMEOUT });
    const list = await kc.makeApiClient(CoreV1Api).listNamespacedPod({ namespace: 'default' });
    expect(list.metadata?.resourceVersion).toBe('7');
    await new Promise((r) => setTimeout(r, TIMEOUT_MS * 2));
    expect((await kc.makeApiClient(CoreV1Api).listNamespacedPod({ namespace: 'default' })).items).toEqual([]);
  });

  it('fails a watch whose connection never gets response headers', async () => {
    const { kc } = loadKubeConfig({ kubeconfig: routed.kubeconfigPath, requestTimeout: TIMEOUT });
    const started = Date.now();
    const ended = new Promise<{ err: unknown; ms: number }>((resolve) => {
      const done = (err: unknown): void => resolve({ err, ms: Date.now() - started });
      void startWatch(kc, '/api/v1/namespaces/default/pods', {}, () => undefined, done);
    });
    const { err, ms } = await ended;
    expect(err).toBeInstanceOf(ApiTimeoutError);
    expect((err as Error).message).toBe(
      `the API server ${routed.url} did not answer within 300 ms ` +
        '(while trying to watch /api/v1/namespaces/default/pods)',
    );
    expect(ms).toBeLessThan(BOUND_MS);
  });

  it('keeps an established watch on which nothing happens', async () => {
    const { kc } = loadKubeConfig({ kubeconfig: routed.kubeconfigPath, requestTimeout: TIMEOUT });
    let ended: unknown = 'not ended';
    const controller = await startWatch(
      kc,
      '/api/v1/namespaces/idle/pods',
      {},
      () => undefined,
      (err) => {
        ended = err;
      },
    );
    // Four timeouts of silence on the stream: still open.
    await new Promise((r) => setTimeout(r, TIMEOUT_MS * 4));
    expect(ended).toBe('not ended');
    controller.abort();
  });

  it('fails a wait for pods whose watch never connects, without waiting for the wait to time out', async () => {
    const { kc } = loadKubeConfig({ kubeconfig: routed.kubeconfigPath, requestTimeout: TIMEOUT });
    const { ms, error } = await timed(() =>
      waitForPods(kc, { namespace: 'default' }, () => undefined, {
        timeoutMs: 60_000,
        onTimeout: () => new Error('wait timed out'),
      }),
    );
    expect(error).toBeInstanceOf(ApiTimeoutError);
    expect(ms).toBeLessThan(BOUND_MS);
  });

  it('retries a stalled watch connect of the pod informer that follows pods for a session', async () => {
    const { kc } = loadKubeConfig({ kubeconfig: routed.kubeconfigPath, requestTimeout: TIMEOUT });
    let stopped: unknown;
    let informer: PodInformer | undefined;
    const found = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('p1 not seen in time')), BOUND_MS);
      informer = informPods(
        kc,
        { namespace: 'retry' },
        (pods) => {
          const p1 = pods.find((p) => p.metadata?.name === 'p1');
          if (p1) {
            clearTimeout(timer);
            resolve(p1.metadata?.name ?? '');
          }
        },
        (err) => (stopped = err),
      );
    });
    informer?.stop();
    expect(found).toBe('p1');
    expect(retryWatches).toBe(2);
    expect(stopped).toBeUndefined();
  });

  it("bounds the pod informer's list: one that never answers stops it with the timeout", async () => {
    const { kc } = loadKubeConfig({ kubeconfig: stalled.kubeconfigPath, requestTimeout: TIMEOUT });
    const { ms, error } = await timed(
      () => new Promise<void>((_resolve, reject) => informPods(kc, { namespace: 'default' }, () => undefined, reject)),
    );
    expect(error).toBeInstanceOf(ApiTimeoutError);
    expect(ms).toBeLessThan(BOUND_MS);
  });

  it('fails a port-forward whose WebSocket upgrade is never answered', async () => {
    const { kc } = loadKubeConfig({ kubeconfig: stalled.kubeconfigPath, requestTimeout: TIMEOUT });
    const { ms, error } = await timed(() => openPortForward(kc, { namespace: 'default', pod: 'p', port: 3000 }));
    expect(error).toBeInstanceOf(ApiTimeoutError);
    expect((error as Error).message).toContain(`the API server ${stalled.url} did not answer within 300 ms`);
    expect(ms).toBeLessThan(BOUND_MS);
  });
});
