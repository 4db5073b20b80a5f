// The shadow API proxy against the stand-in API server (real HTTPS, real sockets): reads and watches pass and stream,
// writes are dry runs that store nothing and are reported with the object before and after, Leases are answered from
// memory so that the echo-controller's leader election wins beside a real holder, and kubectl works through it.
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { Agent, createServer, request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import {
  AuthorizationV1Api,
  CoordinationV1Api,
  CoreV1Api,
  KubeConfig,
  PatchStrategy,
  V1MicroTime,
  Watch,
  setHeaderOptions,
  type V1ConfigMap,
} from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import { becomeLeader } from '../../examples/echo-controller/src/leader.js';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { startRoutedApiServer } from '../../testkit/stalled-api.js';
import { expectStatus } from '../../testkit/api-requests.js';
import { shadowKubeconfig } from './kubeconfig.js';
import { makeSessionCert } from '../process/session-cert.js';
import type { ShadowWrite } from '../reporter.js';
import { startShadowProxy, type ShadowProxy } from './proxy.js';
import { waitFor } from '../../testkit/wait.js';

const run = promisify(execFile);
/** The newest kubectl installed beside the one on the PATH (docs/testing.md). */
const KUBECTL = '/usr/lib/google-cloud-sdk/bin/kubectl.1.33';
const namespace = 'default';

let cluster: ClusterHandle;
let proxy: ShadowProxy;
let dir: string;
let shadowConfigPath: string;
/** Clients straight to the stand-in (the truth) and through the proxy (what the shadowed command sees). */
let real: CoreV1Api;
let shadowKc: KubeConfig;
let shadow: CoreV1Api;
const writes: ShadowWrite[] = [];

/** The store's resourceVersion: it moves on every stored write, and only then. */
const storeVersion = async (): Promise<string | undefined> =>
  (await real.listNamespacedConfigMap({ namespace })).metadata?.resourceVersion;

beforeAll(async () => {
  cluster = await startCluster({ kubelet: false });
  const kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfigPath);
  real = kc.makeApiClient(CoreV1Api);
  proxy = await startShadowProxy({ kc, onWrite: (w) => writes.push(w) });
  dir = mkdtempSync(join(tmpdir(), 'devop-shadow-test-'));
  shadowConfigPath = join(dir, 'kubeconfig');
  writeFileSync(shadowConfigPath, shadowKubeconfig(proxy, namespace));
  shadowKc = new KubeConfig();
  shadowKc.loadFromFile(shadowConfigPath);
  shadow = shadowKc.makeApiClient(CoreV1Api);
});

afterAll(async () => {
  await proxy?.close();
  await cluster?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('shadow API proxy', () => {
  it('lets only the holder of its token in', async () => {
    const status = (headers: Record<string, string>) =>
      new Promise<number | undefined>((resolve, reject) => {
        const req = request(`${proxy.url}/api/v1/namespaces`, { ca: proxy.caPem, headers }, (res) => {
          res.resume();
          resolve(res.statusCode);
        });
        req.on('error', reject);
        req.end();
      });
    expect(await status({})).toBe(401);
    expect(await status({ authorization: 'Bearer nope' })).toBe(401);
    expect(await status({ authorization: `Bearer ${proxy.token}` })).toBe(200);
  });

  it('passes reads with the user credentials and streams a watch as events happen', async () => {
    // Given a ConfigMap in the cluster
    await real.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'seen' }, data: { a: '1' } } });
    // Then a read through the proxy sees it
    expect((await shadow.readNamespacedConfigMap({ name: 'seen', namespace })).data).toEqual({ a: '1' });
    // And a watch through the proxy gets an event for an object created afterwards, while the watch stays open
    const events: string[] = [];
    const watch = await new Watch(shadowKc).watch(
      `/api/v1/namespaces/${namespace}/configmaps`,
      { resourceVersion: await storeVersion() },
      (type, obj: V1ConfigMap) => events.push(`${type} ${obj.metadata?.name}`),
      () => undefined,
    );
    try {
      await real.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'later' } } });
      await waitFor('the watch event through the proxy', () => events.includes('ADDED later'), 10_000);
    } finally {
      watch.abort();
    }
  });

  it('keeps HTTP/1.1 connections alive across requests', async () => {
    const agent = new Agent({ keepAlive: true, maxSockets: 1, ca: proxy.caPem });
    const get = () =>
      new Promise<boolean>((resolve, reject) => {
        const req = request(
          `${proxy.url}/api/v1/namespaces/${namespace}/configmaps`,
          { agent, headers: { authorization: `Bearer ${proxy.token}` } },
          (res) => {
            res.resume();
            res.on('end', () => resolve(req.reusedSocket));
          },
        );
        req.on('error', reject);
        req.end();
      });
    try {
      const reused = [await get(), await get(), await get()];
      expect(reused).toEqual([false, true, true]);
    } finally {
      agent.destroy();
    }
  });

  it('sends writes as dry runs: the answer is the would-be object, the cluster keeps what it had', async () => {
    // Given a ConfigMap in the cluster and the store's version
    await real.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'kept' }, data: { n: '1' } } });
    const version = await storeVersion();
    writes.length = 0;

    // When the shadowed client creates, patches, replaces and deletes
    const created = await shadow.createNamespacedConfigMap({
      namespace,
      body: { metadata: { name: 'made' }, data: { x: 'y' } },
    });
    const patched = await shadow.patchNamespacedConfigMap(
      { name: 'kept', namespace, body: { data: { n: '2' } } },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
    const current = await shadow.readNamespacedConfigMap({ name: 'kept', namespace });
    await shadow.replaceNamespacedConfigMap({ name: 'kept', namespace, body: { ...current, data: { n: '3' } } });
    await shadow.deleteNamespacedConfigMap({ name: 'kept', namespace });

    // Then it got the answers a real write gets
    expect(created.metadata?.uid).toBeTruthy();
    expect(patched.data).toEqual({ n: '2' });
    // And nothing was stored: no new object, the old one as it was, the store's version unmoved
    expect((await expectStatus(real.readNamespacedConfigMap({ name: 'made', namespace }))).code).toBe(404);
    expect((await real.readNamespacedConfigMap({ name: 'kept', namespace })).data).toEqual({ n: '1' });
    expect(await storeVersion()).toBe(version);
    // And each write was reported with the object before and after
    expect(writes.map((w) => `${w.verb} ${w.kind} ${w.name} ${w.result} ${w.status}`)).toEqual([
      'create ConfigMap made dry-run 201',
      'patch ConfigMap kept dry-run 200',
      'update ConfigMap kept dry-run 200',
      'delete ConfigMap kept dry-run 200',
    ]);
    expect(writes[0]).toMatchObject({ namespace, before: null, after: { data: { x: 'y' } } });
    expect(writes[1]).toMatchObject({ before: { data: { n: '1' } }, after: { data: { n: '2' } } });
    expect(writes[3].after).toBeNull();
  });

  it('passes access reviews as they are: they only answer', async () => {
    writes.length = 0;
    const review = await shadowKc.makeApiClient(AuthorizationV1Api).createSelfSubjectAccessReview({
      body: { spec: { resourceAttributes: { verb: 'create', resource: 'configmaps', namespace } } },
    });
    expect(review.status?.allowed).toBe(true);
    expect(writes).toEqual([]);
  });

  it('reports a write the API server refuses, with its message', async () => {
    writes.length = 0;
    const refused = await expectStatus(
      shadow.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'Bad_Name' } } }),
    );
    expect(refused.code).toBe(422);
    expect(writes).toMatchObject([{ verb: 'create', result: 'refused', status: 422 }]);
    expect(writes[0].message).toContain('Bad_Name');
  });

  it('answers Leases from memory: the echo-controller leads beside a real holder that keeps its Lease', async () => {
    // Given a Lease in the cluster, held and just renewed by the real leader
    const leases = new KubeConfig();
    leases.loadFromFile(cluster.kubeconfigPath);
    const coordination = leases.makeApiClient(CoordinationV1Api);
    const now = new V1MicroTime(Date.now());
    await coordination.createNamespacedLease({
      namespace,
      body: {
        metadata: { name: 'echo-controller' },
        spec: { holderIdentity: 'real-leader', leaseDurationSeconds: 15, renewTime: now, acquireTime: now },
      },
    });
    writes.length = 0;

    // When the example's leader election runs through the proxy
    const shutdown = new AbortController();
    const leadership = await becomeLeader({
      kubeConfig: shadowKc,
      namespace,
      name: 'echo-controller',
      identity: 'shadow',
      retryPeriodMs: 100,
      signal: shutdown.signal,
    });
    // Then it leads at once and keeps leading through renewals
    await new Promise((r) => setTimeout(r, 500));
    const lost = await Promise.race([leadership.lost.then(() => true), Promise.resolve(false)]);
    expect(lost).toBe(false);
    // And the real Lease still names the real leader
    const realLease = await coordination.readNamespacedLease({ name: 'echo-controller', namespace });
    expect(realLease.spec?.holderIdentity).toBe('real-leader');
    // And the shadow's reads see its own Lease
    const shadowLeases = shadowKc.makeApiClient(CoordinationV1Api);
    const seen = await shadowLeases.readNamespacedLease({ name: 'echo-controller', namespace });
    expect(seen.spec?.holderIdentity).toBe('shadow');
    // And a stale update conflicts, as it would in the cluster (client-go's optimistic locking)
    const stale = await expectStatus(
      shadowLeases.replaceNamespacedLease({
        name: 'echo-controller',
        namespace,
        body: { ...seen, metadata: { ...seen.metadata, resourceVersion: '0' } },
      }),
    );
    expect(stale.code).toBe(409);
    // And the acquisition was one row (renewals are not), the release another
    await leadership.release();
    shutdown.abort();
    expect(writes.map((w) => `${w.verb} ${w.kind} ${w.name} ${w.result}`)).toEqual([
      'create Lease echo-controller in memory',
      'update Lease echo-controller in memory',
    ]);
  });

  it('serves kubectl: get shows the cluster, apply is a dry run', async () => {
    await real.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'for-kubectl' } } });
    const kubectl = (...args: string[]) =>
      run(KUBECTL, args, { env: { ...process.env, KUBECONFIG: shadowConfigPath, HOME: dir }, timeout: 60_000 });
    const got = await kubectl('get', 'configmaps', '-n', namespace);
    expect(got.stdout).toMatch(/^for-kubectl\s/m);
    const version = await storeVersion();
    writes.length = 0;
    const file = join(dir, 'applied.yaml');
    writeFileSync(file, 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  k: v\n');
    const applied = await kubectl('apply', '-f', file);
    expect(applied.stdout).toContain('configmap/applied created');
    expect((await expectStatus(real.readNamespacedConfigMap({ name: 'applied', namespace }))).code).toBe(404);
    expect(await storeVersion()).toBe(version);
    expect(writes).toMatchObject([{ verb: 'create', kind: 'ConfigMap', name: 'applied', result: 'dry-run' }]);
  }, 120_000);

  it('refuses pods/exec and pods/attach, upgraded or not: they would run a command in the cluster', async () => {
    const ask = (path: string, headers: Record<string, string>, method = 'GET') =>
      new Promise<{ status?: number; body: string }>((resolve, reject) => {
        const req = request(
          `${proxy.url}${path}`,
          { method, ca: proxy.caPem, headers: { authorization: `Bearer ${proxy.token}`, ...headers } },
          (res) => {
            let body = '';
            res.on('data', (d: Buffer) => (body += d.toString()));
            res.on('end', () => resolve({ status: res.statusCode, body }));
          },
        );
        req.on('error', reject);
        req.end();
      });
    const upgraded = await ask(`/api/v1/namespaces/${namespace}/pods/p/exec?command=ls`, {
      connection: 'Upgrade',
      upgrade: 'websocket',
      'sec-websocket-version': '13',
      'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==',
    });
    expect(upgraded.status).toBe(403);
    expect(JSON.parse(upgraded.body).message).toContain('does not forward pods/exec');
    const posted = await ask(`/api/v1/namespaces/${namespace}/pods/p/attach`, {}, 'POST');
    expect(posted.status).toBe(403);
  });

  it('ends the upstream watch when the watching client goes away', async () => {
    // Given an API server whose watch never ends, and a proxy in front of it
    let upstreamClosed!: () => void;
    const closed = new Promise<void>((resolve) => (upstreamClosed = resolve));
    const api = await startRoutedApiServer((req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"type":"ADDED","object":{"kind":"ConfigMap","metadata":{"name":"a","resourceVersion":"1"}}}\n');
      req.socket.on('close', () => upstreamClosed());
    });
    const kc = new KubeConfig();
    kc.loadFromFile(api.kubeconfigPath);
    const front = await startShadowProxy({ kc, onWrite: () => undefined });
    try {
      // When a client watches through the proxy, gets the first event, and goes away
      const first = await new Promise<string>((resolve, reject) => {
        const req = request(
          `${front.url}/api/v1/namespaces/${namespace}/configmaps?watch=true`,
          { ca: front.caPem, headers: { authorization: `Bearer ${front.token}` } },
          (res) =>
            res.once('data', (d: Buffer) => {
              resolve(d.toString());
              req.destroy();
            }),
        );
        req.on('error', reject);
        req.end();
      });
      expect(first).toContain('"ADDED"');
      // Then the proxy's upstream connection closes too (keep-alive would otherwise hold the watch open for good)
      await Promise.race([
        closed,
        new Promise((_, reject) => setTimeout(() => reject(new Error('the upstream watch stayed open')), 5_000)),
      ]);
    } finally {
      await front.close();
      await api.close();
    }
  });

  it('carries WebSocket watches with the user credentials, and says no to SPDY and to port-forward', async () => {
    // Given an API server that answers WebSockets by echoing, and sees the credentials
    const cert = makeSessionCert('devop shadow API proxy');
    const upstream = createServer(cert);
    const sockets = new WebSocketServer({ server: upstream });
    const seen: (string | undefined)[] = [];
    sockets.on('connection', (socket, req) => {
      seen.push(req.headers.authorization);
      socket.on('message', (data) => socket.send(`echo ${data.toString()}`));
    });
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    const port = (upstream.address() as { port: number }).port;
    const kc = new KubeConfig();
    kc.loadFromString(
      shadowKubeconfig({ url: `https://127.0.0.1:${port}`, token: 'upstream-token', caPem: cert.cert }, namespace),
    );
    const front = await startShadowProxy({ kc, onWrite: () => undefined });
    try {
      // When a client opens a WebSocket watch through the proxy
      const path = `/api/v1/namespaces/${namespace}/configmaps?watch=true`;
      const client = new WebSocket(`wss://127.0.0.1:${front.port}${path}`, {
        ca: front.caPem,
        headers: { authorization: `Bearer ${front.token}` },
      });
      const answer = await new Promise<string>((resolve, reject) => {
        client.on('open', () => client.send('hi'));
        client.on('message', (data) => resolve(data.toString()));
        client.on('error', reject);
      });
      client.close();
      // Then the bytes go both ways and upstream saw the user's token, not the proxy's
      expect(answer).toBe('echo hi');
      expect(seen).toEqual(['Bearer upstream-token']);
      // And a SPDY upgrade gets a Status that says why
      const spdy = await new Promise<number | undefined>((resolve, reject) => {
        const req = request(`${front.url}${path}`, {
          method: 'POST',
          ca: front.caPem,
          headers: { authorization: `Bearer ${front.token}`, connection: 'Upgrade', upgrade: 'SPDY/3.1' },
        });
        req.on('response', (res) => resolve(res.statusCode));
        req.on('error', reject);
        req.end();
      });
      expect(spdy).toBe(400);
      // And a port-forward WebSocket is refused: it would reach the pod's ports, whose writes no dry run covers
      const forward = new WebSocket(`wss://127.0.0.1:${front.port}/api/v1/namespaces/${namespace}/pods/p/portforward`, {
        ca: front.caPem,
        headers: { authorization: `Bearer ${front.token}` },
      });
      const refused = await new Promise<number | undefined>((resolve) => {
        forward.on('unexpected-response', (_req, res) => resolve(res.statusCode));
        forward.on('open', () => resolve(101));
        forward.on('error', () => undefined);
      });
      forward.terminate();
      expect(refused).toBe(403);
      expect(seen).toEqual(['Bearer upstream-token']);
    } finally {
      await front.close();
      sockets.close();
      upstream.closeAllConnections();
      await new Promise((resolve) => upstream.close(resolve));
    }
  });

  it('works in front of a plain http:// server too (kubectl proxy)', async () => {
    // Given kubectl proxy in front of the stand-in, and a kubeconfig that names it
    const kubectlProxy = spawn(KUBECTL, ['proxy', '--port=0'], {
      env: { ...process.env, KUBECONFIG: cluster.kubeconfigPath, HOME: dir },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    try {
      const port = await new Promise<string>((resolve, reject) => {
        let out = '';
        kubectlProxy.stdout!.on('data', (d: Buffer) => {
          out += d.toString();
          const m = /Starting to serve on 127\.0\.0\.1:(\d+)/.exec(out);
          if (m) resolve(m[1]);
        });
        kubectlProxy.once('exit', (code) => reject(new Error(`kubectl proxy exited ${code}`)));
      });
      const kc = new KubeConfig();
      kc.loadFromOptions({
        clusters: [{ name: 'p', server: `http://127.0.0.1:${port}`, skipTLSVerify: false }],
        users: [{ name: 'u' }],
        contexts: [{ name: 'c', cluster: 'p', user: 'u' }],
        currentContext: 'c',
      });
      const seen: ShadowWrite[] = [];
      const front = await startShadowProxy({ kc, onWrite: (w) => seen.push(w) });
      try {
        // When a client reads and writes through the shadow proxy
        const client = new KubeConfig();
        client.loadFromString(shadowKubeconfig(front, namespace));
        const api = client.makeApiClient(CoreV1Api);
        expect((await api.listNamespacedConfigMap({ namespace })).items.length).toBeGreaterThan(0);
        await api.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'via-kubectl-proxy' } } });
        // Then the read came from the cluster and the write was a dry run
        expect((await expectStatus(real.readNamespacedConfigMap({ name: 'via-kubectl-proxy', namespace }))).code).toBe(
          404,
        );
        expect(seen).toMatchObject([{ verb: 'create', name: 'via-kubectl-proxy', result: 'dry-run' }]);
      } finally {
        await front.close();
      }
    } finally {
      kubectlProxy.kill('SIGTERM');
    }
  }, 60_000);
});

interface Reply {
  status?: number;
  body: string;
}

/** One raw request to a shadow proxy, as a client other than client-node could send it. */
function ask(
  front: Pick<ShadowProxy, 'url' | 'caPem' | 'token'>,
  path: string,
  options: { method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { authorization: `Bearer ${front.token}`, ...options.headers };
    if (options.body !== undefined) headers['content-length'] = String(Buffer.byteLength(options.body));
    const req = request(`${front.url}${path}`, { method: options.method ?? 'GET', ca: front.caPem, headers }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    req.on('error', reject);
    req.end(options.body);
  });
}

/** What an API server received: method, target and body as they reached it. */
interface Received {
  method?: string;
  url?: string;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** A shadow proxy in front of an API server that records every request and answers each with a success Status. */
async function recordingProxy(): Promise<{ front: ShadowProxy; received: Received[]; close(): Promise<void> }> {
  const received: Received[] = [];
  const api = await startRoutedApiServer((req, res) => {
    let body = '';
    req.on('data', (d: Buffer) => (body += d.toString()));
    req.on('end', () => {
      received.push({ method: req.method, url: req.url, headers: req.headers, body });
      const text = JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Success', code: 200 });
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
      res.end(text);
    });
  });
  const kc = new KubeConfig();
  kc.loadFromFile(api.kubeconfigPath);
  const front = await startShadowProxy({ kc, onWrite: () => undefined });
  return {
    front,
    received,
    close: async () => {
      await front.close();
      await api.close();
    },
  };
}

describe('shadow API proxy: deletes are dry runs, and what no dry run covers is refused', () => {
  const kubectl = (...args: string[]) =>
    run(KUBECTL, args, { env: { ...process.env, KUBECONFIG: shadowConfigPath, HOME: dir }, timeout: 60_000 });

  it('kubectl delete (DeleteOptions in the body) gets a dry-run answer and the object stays', async () => {
    // Given a ConfigMap in the cluster
    await real.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'kubectl-deletes' } } });
    const version = await storeVersion();
    writes.length = 0;
    // When kubectl deletes it through the shadow kubeconfig (--wait=false: kubectl otherwise waits for the object to
    // go, which a dry run never makes it do)
    const deleted = await kubectl('delete', 'configmap', 'kubectl-deletes', '-n', namespace, '--wait=false');
    // Then kubectl was told it was deleted, and the cluster still has it, its store unmoved
    expect(deleted.stdout).toContain('configmap "kubectl-deletes" deleted');
    expect((await real.readNamespacedConfigMap({ name: 'kubectl-deletes', namespace })).metadata?.name).toBe(
      'kubectl-deletes',
    );
    expect(await storeVersion()).toBe(version);
    expect(writes).toMatchObject([{ verb: 'delete', kind: 'ConfigMap', name: 'kubectl-deletes', result: 'dry-run' }]);
  }, 120_000);

  it('client-node deletes, with DeleteOptions or a dryRun of its own, are dry runs and the object stays', async () => {
    // Given a ConfigMap in the cluster
    await real.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'node-deletes' } } });
    const version = await storeVersion();
    // When client-node deletes it as a controller does (options in the body), without options, and with a dryRun
    // value kube-apiserver would refuse (it must not turn into a real delete on the way)
    await shadow.deleteNamespacedConfigMap({
      name: 'node-deletes',
      namespace,
      body: { propagationPolicy: 'Foreground', gracePeriodSeconds: 0 },
    });
    await shadow.deleteNamespacedConfigMap({ name: 'node-deletes', namespace });
    await shadow.deleteNamespacedConfigMap({ name: 'node-deletes', namespace, body: { dryRun: ['Bogus'] } });
    await shadow.deleteNamespacedConfigMap({ name: 'node-deletes', namespace, dryRun: 'Bogus' });
    await shadow.deleteCollectionNamespacedConfigMap({ namespace, body: { propagationPolicy: 'Background' } });
    // Then the ConfigMap is still there and nothing was stored
    expect((await real.readNamespacedConfigMap({ name: 'node-deletes', namespace })).metadata?.name).toBe(
      'node-deletes',
    );
    expect(await storeVersion()).toBe(version);
  });

  it('a create with dryRun=Bogus from the client is a dry run all the same', async () => {
    const version = await storeVersion();
    const answer = await ask(proxy, `/api/v1/namespaces/${namespace}/configmaps?dryRun=Bogus`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ metadata: { name: 'bogus-dry-run' } }),
    });
    expect(answer.status).toBe(201);
    expect((await expectStatus(real.readNamespacedConfigMap({ name: 'bogus-dry-run', namespace }))).code).toBe(404);
    expect(await storeVersion()).toBe(version);
  });

  it('sends dryRun All in the DELETE body (where kube-apiserver reads it), announced, and in the query', async () => {
    // Given a proxy in front of an API server that records what reaches it (handlers/delete.go reads DeleteOptions
    // from the body when there is one and ignores the query then: a dry run only in the query would be real)
    const { front, received, close } = await recordingProxy();
    try {
      // When a client deletes with options in the body, and deletes a collection with options in the query only
      await ask(front, `/api/v1/namespaces/${namespace}/configmaps/c?dryRun=Bogus`, {
        method: 'DELETE',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ kind: 'DeleteOptions', apiVersion: 'v1', propagationPolicy: 'Foreground' }),
      });
      await ask(front, `/api/v1/namespaces/${namespace}/configmaps?labelSelector=a%3Db&propagationPolicy=Orphan`, {
        method: 'DELETE',
      });
      // Then each DELETE upstream has a JSON body with the client's options and dryRun All, with its Content-Length
      const deletes = received.filter((r) => r.method === 'DELETE');
      expect(deletes.map((r) => JSON.parse(r.body))).toEqual([
        { kind: 'DeleteOptions', apiVersion: 'v1', propagationPolicy: 'Foreground', dryRun: ['All'] },
        { propagationPolicy: 'Orphan', dryRun: ['All'] },
      ]);
      for (const r of deletes) {
        expect(r.headers['content-length']).toBe(String(Buffer.byteLength(r.body)));
        expect(r.headers['content-type']).toBe('application/json');
        expect(new URL(r.url ?? '', 'https://x').searchParams.getAll('dryRun')).toEqual(['All']);
      }
      expect(new URL(deletes[1].url ?? '', 'https://x').searchParams.get('labelSelector')).toBe('a=b');
    } finally {
      await close();
    }
  });

  it('refuses a protobuf DELETE body with 415 and one line, and sends nothing upstream', async () => {
    const { front, received, close } = await recordingProxy();
    try {
      const answer = await ask(front, `/api/v1/namespaces/${namespace}/configmaps/c`, {
        method: 'DELETE',
        headers: { 'content-type': 'application/vnd.kubernetes.protobuf' },
        body: 'k8s\u0000\n\u0015\n\u0002v1\u0012\rDeleteOptions',
      });
      expect(answer.status).toBe(415);
      expect(JSON.parse(answer.body).message).toMatch(/^devop --shadow [^\n]*application\/json[^\n]*$/);
      expect(received.filter((r) => r.method === 'DELETE')).toEqual([]);
    } finally {
      await close();
    }
  });

  it.each([
    ['a service-account token', 'POST', '/api/v1/namespaces/default/serviceaccounts/default/token', {}],
    ['a non-resource write', 'PUT', '/debug/flags/v', {}],
    ['a pod proxy read', 'GET', '/api/v1/namespaces/default/pods/p/proxy/', {}],
    ['a service proxy write', 'POST', '/api/v1/namespaces/default/services/s/proxy/orders', {}],
    ['a node proxy (the kubelet API)', 'GET', '/api/v1/nodes/n/proxy/pods', {}],
    ['pods/x%2Fexec (exec once decoded)', 'POST', '/api/v1/namespaces/default/pods/x%2Fexec?command=id', {}],
    ['pods/x%2Fproxy on a read', 'GET', '/api/v1/namespaces/default/pods/x%2Fproxy', {}],
    ['an impersonating read', 'GET', '/api/v1/namespaces/default/secrets', { 'impersonate-user': 'admin' }],
    ['an impersonating write', 'POST', '/api/v1/namespaces/default/configmaps', { 'Impersonate-Group': 'x' }],
    ['a write the proxy cannot parse', 'POST', '/apis/apps/v1', {}],
    ['pods/attach', 'POST', '/api/v1/namespaces/default/pods/p/attach', {}],
    ['pods/portforward', 'POST', '/api/v1/namespaces/default/pods/p/portforward', {}],
  ])('refuses %s with a 403 that says why, and sends nothing upstream', async (_what, method, path, headers) => {
    const { front, received, close } = await recordingProxy();
    try {
      const answer = await ask(front, path, { method, headers, ...(method === 'GET' ? {} : { body: '{}' }) });
      expect(answer.status).toBe(403);
      expect(JSON.parse(answer.body)).toMatchObject({ kind: 'Status', code: 403, reason: 'Forbidden' });
      expect(JSON.parse(answer.body).message).toMatch(/^devop --shadow [^\n]+$/);
      expect(received).toEqual([]);
    } finally {
      await close();
    }
  });

  it('kubectl create token and kubectl exec through the shadow get one line naming the refusal', async () => {
    const failure = async (...args: string[]) => {
      const failed = await kubectl(...args).then(
        () => undefined,
        (err: { stderr: string }) => err,
      );
      expect(failed, `kubectl ${args.join(' ')} succeeded`).toBeDefined();
      return failed?.stderr ?? '';
    };
    expect(await failure('create', 'token', 'default', '-n', namespace)).toMatch(
      /^error: failed to create token: devop --shadow does not forward serviceaccounts\/token: [^\n]+\n$/,
    );
    await real.createNamespacedPod({
      namespace,
      body: { metadata: { name: 'exec-target' }, spec: { containers: [{ name: 'c', image: 'devop.test/shell' }] } },
    });
    expect(await failure('exec', 'exec-target', '-n', namespace, '--', 'id')).toContain(
      'devop --shadow does not forward pods/exec',
    );
  }, 120_000);

  it('refuses WebSocket upgrades to proxy and exec subresources before they reach the server', async () => {
    const { front, received, close } = await recordingProxy();
    try {
      for (const path of [
        `/api/v1/namespaces/${namespace}/pods/p/proxy/ws`,
        `/api/v1/nodes/n/proxy/exec/default/p/c?command=id`,
        `/api/v1/namespaces/${namespace}/pods/x%2Fexec?command=id`,
      ]) {
        const socket = new WebSocket(`wss://127.0.0.1:${front.port}${path}`, {
          ca: front.caPem,
          headers: { authorization: `Bearer ${front.token}` },
        });
        const status = await new Promise<number | undefined>((resolve) => {
          socket.on('unexpected-response', (_req, res) => resolve(res.statusCode));
          socket.on('open', () => resolve(101));
          socket.on('error', () => undefined);
        });
        socket.terminate();
        expect(status, path).toBe(403);
      }
      expect(received).toEqual([]);
    } finally {
      await close();
    }
  });
});
