// The proxy subresources on the stand-in reach the app as kube-apiserver's do: pods/NAME[:PORT]/proxy/PATH and
// services/NAME[:PORT]/proxy/PATH forward any method, the query (dryRun included: the API server does not read it) and
// the body to the pod, and WebSocket upgrades too. Upstream: kubernetes pkg/registry/core/pod/rest/subresources.go
// (ProxyREST) and pod/strategy.go (ResourceLocation), pkg/registry/core/service/proxy.go, apimachinery
// pkg/util/proxy/upgradeaware.go (redirect of the bare .../proxy, upgrades) and transport.go (503 when unreachable).
import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { connect } from 'node:tls';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { rawRequest } from '../../testkit/api-requests.js';
import { isReady, readAll, waitForPod } from '../../testkit/pods.js';
import { waitFor } from '../../testkit/wait.js';

requireRoot('stand-in proxy subresources');

const run = promisify(execFile);
const namespace = 'default';
const ns = `/api/v1/namespaces/${namespace}`;
let cluster: ClusterHandle;
let core: CoreV1Api;

/** A server that answers an Upgrade with 101 and then sends back what it gets, upper-cased. */
const UPGRADE_ECHO = `require('node:net').createServer((s) => {
  let head = '';
  const onHead = (c) => {
    head += c.toString('latin1');
    if (!head.includes('\\r\\n\\r\\n')) return;
    s.off('data', onHead);
    console.log('upgrade ' + head.split('\\r\\n')[0]);
    s.write('HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\n\\r\\n');
    s.on('data', (d) => s.write(d.toString().toUpperCase()));
  };
  s.on('data', onHead);
}).listen(9090);`;

beforeAll(async () => {
  cluster = await startCluster();
  const kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfigPath);
  core = kc.makeApiClient(CoreV1Api);
  await core.createNamespacedPod({
    namespace,
    body: {
      metadata: { name: 'echo', labels: { app: 'echo' } },
      spec: {
        containers: [
          {
            name: 'echo',
            image: 'devop.test/http-echo',
            ports: [{ name: 'http', containerPort: 8080 }],
            readinessProbe: { tcpSocket: { port: 8080 }, periodSeconds: 1 },
          },
          { name: 'upgrades', image: 'devop.test/http-echo', command: ['/usr/local/bin/node', '-e', UPGRADE_ECHO] },
        ],
      },
    },
  });
  await core.createNamespacedService({
    namespace,
    body: {
      metadata: { name: 'echo-svc' },
      spec: { selector: { app: 'echo' }, ports: [{ name: 'web', port: 80, targetPort: 8080 }] },
    },
  });
  await waitForPod(core, 'echo', 'Ready', isReady, 60_000);
}, 90_000);

afterAll(async () => {
  await cluster?.stop();
});

const admin = (method: string, path: string, body?: string | object, headers?: Record<string, string>) =>
  rawRequest(cluster, cluster.adminToken, method, path, body, headers);

/** What the echo app saw of one request (it answers with it). */
interface Seen {
  method: string;
  path: string;
  body: string;
  headers: Record<string, string>;
}

describe('pods/NAME[:PORT]/proxy and services/NAME[:PORT]/proxy', () => {
  it('a write with dryRun=All through pods/…/proxy reaches the app, query and body included', async () => {
    // When a POST with dryRun=All goes to the pod through the API server
    const answer = await admin('POST', `${ns}/pods/echo:8080/proxy/items?dryRun=All`, { order: 1 });
    // Then the app answered it: it got the method, path, query and body; the caller's token stayed behind
    expect(answer.status).toBe(200);
    const seen = answer.body as Seen;
    expect(seen).toMatchObject({ method: 'POST', path: '/items?dryRun=All', body: '{"order":1}' });
    expect(seen.headers.authorization).toBeUndefined();
    expect(seen.headers['x-forwarded-uri']).toBe(`${ns}/pods/echo:8080/proxy/items`);
    // And the app's own log shows the write arrived
    const log = await readAll(
      await cluster.runtime!.logs({ namespace, pod: 'echo', container: 'echo', follow: false }),
    );
    expect(log).toMatch(/POST \/items\?dryRun=All from /);
    // And without a port the first container port is used; DELETE and PUT pass too
    const del = await admin('DELETE', `${ns}/pods/echo/proxy/items/1?dryRun=All`);
    expect((del.body as Seen).method).toBe('DELETE');
    const put = await admin('PUT', `${ns}/pods/http:echo:8080/proxy/items/2`, 'two', { 'content-type': 'text/plain' });
    expect(put.body as Seen).toMatchObject({ method: 'PUT', path: '/items/2', body: 'two' });
  });

  it('services/NAME:PORT/proxy reaches a ready endpoint, by port number or port name', async () => {
    const byNumber = await admin('PATCH', `${ns}/services/echo-svc:80/proxy/config?dryRun=All`, { on: true });
    expect(byNumber.body as Seen).toMatchObject({ method: 'PATCH', path: '/config?dryRun=All', body: '{"on":true}' });
    const byName = await admin('POST', `${ns}/services/echo-svc:web/proxy/hooks`, 'hi');
    expect((byName.body as Seen).path).toBe('/hooks');
    const noPort = await admin('GET', `${ns}/services/echo-svc:81/proxy/`);
    expect([noPort.status, noPort.body.message]).toEqual([503, 'no service port 81 found for service "echo-svc"']);
  });

  it('the bare …/proxy redirects a GET, a dead port is a 503, and it needs the verb on pods/proxy', async () => {
    const bare = await admin('GET', `${ns}/pods/echo:8080/proxy?x=1`);
    expect([bare.status, bare.headers.location]).toEqual([301, `${ns}/pods/echo:8080/proxy/?x=1`]);
    const dead = await admin('GET', `${ns}/pods/echo:8081/proxy/`);
    expect([dead.status, dead.body.message]).toEqual([503, expect.stringMatching(/^error trying to reach service: /)]);
    const denied = await rawRequest(cluster, cluster.restrictedToken, 'POST', `${ns}/pods/echo/proxy/items`, {});
    expect([denied.status, denied.body.message]).toEqual([
      403,
      expect.stringMatching(/cannot create resource "pods\/proxy"/),
    ]);
  });

  it('an upgrade through pods/…/proxy reaches the app and carries bytes both ways', async () => {
    // When a client sends an Upgrade request for the pod's port 9090 through the API server
    const url = new URL(cluster.server);
    const socket = connect({ host: url.hostname, port: Number(url.port), ca: readFileSync(cluster.caPath) });
    await new Promise((r) => socket.once('secureConnect', r));
    socket.write(
      `GET ${ns}/pods/echo:9090/proxy/ws HTTP/1.1\r\nHost: ${url.host}\r\n` +
        `Authorization: Bearer ${cluster.adminToken}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n`,
    );
    let got = '';
    socket.on('data', (c: Buffer) => {
      got += c.toString();
      if (got.includes('\r\n\r\n') && !got.includes('PING')) socket.write('ping');
    });
    // Then the app switched protocols and its answers come back through the same connection
    await waitFor('the PING through the proxied WebSocket', () => got.includes('PING'), 10_000);
    socket.destroy();
    expect(got).toMatch(/^HTTP\/1.1 101 Switching Protocols/);
    const log = await readAll(
      await cluster.runtime!.logs({ namespace, pod: 'echo', container: 'upgrades', follow: false }),
    );
    expect(log).toMatch(/upgrade GET \/ws HTTP\/1.1/);
  });

  it('kubectl 1.33 get --raw and create --raw reach the pod through …/proxy', async () => {
    const kubectl = (...args: string[]) => run('kubectl', ['--kubeconfig', cluster.kubeconfigPath, ...args]);
    const got = JSON.parse((await kubectl('get', '--raw', `${ns}/pods/echo:8080/proxy/read`)).stdout) as Seen;
    expect([got.method, got.path]).toEqual(['GET', '/read']);
    const file = join(cluster.caPath, '..', 'proxy-body.json');
    writeFileSync(file, '{"via":"kubectl"}');
    const posted = JSON.parse(
      (await kubectl('create', '--raw', `${ns}/services/echo-svc:80/proxy/write`, '-f', file)).stdout,
    );
    expect(posted as Seen).toMatchObject({ method: 'POST', path: '/write', body: '{"via":"kubectl"}' });
  });
});
