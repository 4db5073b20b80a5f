// APIService aggregation: discovery and requests for an aggregated group reach the Service's endpoint over TLS with the
// caller's identity (X-Remote-User), and the APIService reports Available — checked with client-node and kubectl.
import { execFile } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import { tmpdir } from 'node:os';
import type { TLSSocket } from 'node:tls';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { ApiregistrationV1Api, CoreV1Api, CustomObjectsApi, KubeConfig } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeCerts } from '../../standin/certs.js';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { rawRequest } from '../../testkit/api-requests.js';
import { waitFor } from '../../testkit/wait.js';

const runFile = promisify(execFile);
let cluster: ClusterHandle;
let kc: KubeConfig;
let backend: Server;
let dir: string;
const seenUsers: string[] = [];
/** The headers of each request the aggregated server received. */
const seenHeaders: NodeJS.Dict<string[]>[] = [];
/** The client certificate each request came with: its subject CN and its DER bytes. */
const seenClients: { cn?: string; raw?: Buffer }[] = [];

const resourceList = {
  kind: 'APIResourceList',
  apiVersion: 'v1',
  groupVersion: 'farm.example.com/v1alpha',
  resources: [{ name: 'llamas', singularName: 'llama', namespaced: true, kind: 'Llama', verbs: ['get', 'list'] }],
};

/** The aggregated server's own OpenAPI v3: its index and its group-version's document. */
const LLAMA_GVK = { group: 'farm.example.com', version: 'v1alpha', kind: 'Llama' };
const openapiV3Index = {
  paths: {
    'apis/farm.example.com/v1alpha': { serverRelativeURL: '/openapi/v3/apis/farm.example.com/v1alpha?hash=F1' },
  },
};
const openapiV3Doc = {
  openapi: '3.0.0',
  info: { title: 'farm', version: 'v1alpha' },
  paths: {
    '/apis/farm.example.com/v1alpha/llamas': { get: { 'x-kubernetes-group-version-kind': LLAMA_GVK, responses: {} } },
    '/apis/farm.example.com/v1alpha/namespaces/{namespace}/llamas': {
      get: { 'x-kubernetes-group-version-kind': LLAMA_GVK, responses: {} },
    },
  },
  components: {
    schemas: {
      'com.example.farm.v1alpha.Llama': {
        type: 'object',
        description: 'A Llama lives on the farm.',
        properties: { spec: { type: 'object', description: 'How heavy the llama is.' } },
        'x-kubernetes-group-version-kind': [LLAMA_GVK],
      },
    },
  },
};

/** The same server's OpenAPI v2 document (what kubectl's --output plaintext-openapiv2 and kubectl 1.27/1.28 read). */
const openapiV2Doc = {
  swagger: '2.0',
  info: { title: 'farm', version: 'v1alpha' },
  paths: {
    '/apis/farm.example.com/v1alpha/namespaces/{namespace}/llamas': {
      get: {
        'x-kubernetes-group-version-kind': LLAMA_GVK,
        responses: { '200': { description: 'OK', schema: { $ref: '#/definitions/com.example.farm.v1alpha.Llama' } } },
      },
    },
  },
  definitions: {
    'com.example.farm.v1alpha.Llama': {
      type: 'object',
      description: 'A Llama lives on the farm (v2).',
      properties: { spec: { type: 'object', description: 'How heavy the llama is, in v2.' } },
      'x-kubernetes-group-version-kind': [LLAMA_GVK],
    },
  },
};

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'devop-agg-'));
  const certs = await makeCerts(dir, ['IP:127.0.0.1']);
  // Asks for a client certificate without requiring one, as k8s.io/apiserver's servers do (requestheader).
  backend = createServer(
    { cert: certs.certPem, key: certs.keyPem, requestCert: true, rejectUnauthorized: false },
    (req, res) => {
      seenUsers.push(String(req.headers['x-remote-user']));
      seenHeaders.push(req.headersDistinct);
      const socket = req.socket as TLSSocket;
      const peer = socket.getPeerCertificate();
      seenClients.push({ cn: peer?.subject?.CN as string | undefined, raw: peer?.raw });
      res.setHeader('Content-Type', 'application/json');
      const path = (req.url ?? '').split('?')[0];
      if (path === '/apis/farm.example.com/v1alpha') return res.end(JSON.stringify(resourceList));
      if (path === '/openapi/v3') return res.end(JSON.stringify(openapiV3Index));
      if (path === '/openapi/v2') return res.end(JSON.stringify(openapiV2Doc));
      if (path === '/openapi/v3/apis/farm.example.com/v1alpha') return res.end(JSON.stringify(openapiV3Doc));
      if (path === '/apis/farm.example.com/v1alpha/namespaces/default/llamas') {
        return res.end(
          JSON.stringify({
            kind: 'LlamaList',
            apiVersion: 'farm.example.com/v1alpha',
            metadata: {},
            items: [
              {
                apiVersion: 'farm.example.com/v1alpha',
                kind: 'Llama',
                metadata: { name: 'dolly', namespace: 'default', creationTimestamp: new Date().toISOString() },
                spec: { weight: 130 },
              },
            ],
          }),
        );
      }
      res.statusCode = 404;
      res.end(
        JSON.stringify({
          kind: 'Status',
          apiVersion: 'v1',
          metadata: {},
          status: 'Failure',
          reason: 'NotFound',
          code: 404,
          message: 'not found',
        }),
      );
    },
  );
  await new Promise<void>((r) => backend.listen(0, '127.0.0.1', () => r()));
  const port = (backend.address() as { port: number }).port;
  cluster = await startCluster({ kubelet: false });
  kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfigPath);
  const core = kc.makeApiClient(CoreV1Api);
  await core.createNamespacedService({
    namespace: 'default',
    body: { metadata: { name: 'farm' }, spec: { ports: [{ name: 'https', port: 443, targetPort: port }] } },
  });
  await core.createNamespacedEndpoints({
    namespace: 'default',
    body: {
      metadata: { name: 'farm' },
      subsets: [{ addresses: [{ ip: '127.0.0.1' }], ports: [{ name: 'https', port }] }],
    },
  });
  await kc.makeApiClient(ApiregistrationV1Api).createAPIService({
    body: {
      metadata: { name: 'v1alpha.farm.example.com' },
      spec: {
        group: 'farm.example.com',
        version: 'v1alpha',
        groupPriorityMinimum: 1000,
        versionPriority: 15,
        insecureSkipTLSVerify: true,
        service: { name: 'farm', namespace: 'default', port: 443 },
      },
    },
  });
});

afterAll(async () => {
  await cluster?.stop();
  backend?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('APIService aggregation', () => {
  it('marks the APIService Available and proxies discovery and requests with the caller identity', async () => {
    const reg = kc.makeApiClient(ApiregistrationV1Api);
    await waitFor(
      'Available=True',
      async () =>
        (await reg.readAPIService({ name: 'v1alpha.farm.example.com' })).status?.conditions?.find(
          (c) => c.type === 'Available',
        )?.status === 'True',
    );
    const list: any = await kc.makeApiClient(CustomObjectsApi).listNamespacedCustomObject({
      group: 'farm.example.com',
      version: 'v1alpha',
      namespace: 'default',
      plural: 'llamas',
    });
    expect(list.items.map((i: any) => i.metadata.name)).toEqual(['dolly']);
    expect(seenUsers).toContain('kubernetes-admin');
  });

  // client-go transport/round_trippers.go SetAuthProxyHeaders (kube-aggregator's proxy): the caller's own X-Remote-*
  // headers are removed, then X-Remote-User, one X-Remote-Group per group and X-Remote-Extra-<key> per extra are set.
  it("replaces the caller's X-Remote-* headers with its identity, extras as X-Remote-Extra-<key>", async () => {
    // Given a caller that sends X-Remote-* of its own and impersonates a user with groups and extras
    seenHeaders.length = 0;
    const answer = await rawRequest(
      cluster,
      cluster.adminToken,
      'GET',
      '/apis/farm.example.com/v1alpha/namespaces/default/llamas',
      undefined,
      {
        'x-remote-user': 'mallory',
        'x-remote-group': 'system:masters',
        'x-remote-extra-scopes': 'all',
        'x-remote-uid': 'forged',
        'impersonate-user': 'jane',
        'impersonate-group': ['developers', 'system:masters'],
        'impersonate-extra-scopes': ['read', 'write'],
        'impersonate-extra-example.com%2fteam': 'llamas',
      },
    );
    // When the aggregator proxies the request
    expect(answer.status).toBe(200);
    const h = seenHeaders.at(-1) ?? {};
    // Then the server sees the impersonated identity only
    expect(h['x-remote-user']).toEqual(['jane']);
    expect(h['x-remote-group']).toEqual(['developers', 'system:masters', 'system:authenticated']);
    expect(h['x-remote-extra-scopes']).toEqual(['read', 'write']);
    expect(h['x-remote-extra-example.com%2fteam']).toEqual(['llamas']);
    expect(h['x-remote-uid']).toBeUndefined();
    expect(Object.keys(h).filter((k) => k.startsWith('impersonate-') || k === 'authorization')).toEqual([]);
  });

  // kube-apiserver's --proxy-client-cert-file and the extension-apiserver-authentication ConfigMap
  // (kubernetes pkg/controlplane/controller/clusterauthenticationtrust/cluster_authentication_trust_controller.go):
  // an aggregated server trusts X-Remote-* from a connection whose client certificate the published CA signed.
  it('presents the front-proxy client certificate that kube-system/extension-apiserver-authentication names', async () => {
    // Given the ConfigMap the API server publishes
    const cm = await kc
      .makeApiClient(CoreV1Api)
      .readNamespacedConfigMap({ namespace: 'kube-system', name: 'extension-apiserver-authentication' });
    expect(JSON.parse(cm.data?.['requestheader-allowed-names'] ?? '')).toEqual(['front-proxy-client']);
    expect(JSON.parse(cm.data?.['requestheader-username-headers'] ?? '')).toEqual(['X-Remote-User']);
    expect(JSON.parse(cm.data?.['requestheader-group-headers'] ?? '')).toEqual(['X-Remote-Group']);
    expect(JSON.parse(cm.data?.['requestheader-extra-headers-prefix'] ?? '')).toEqual(['X-Remote-Extra-']);
    seenClients.length = 0;
    // When a request is proxied
    const answer = await rawRequest(cluster, cluster.adminToken, 'GET', '/apis/farm.example.com/v1alpha');
    expect(answer.status).toBe(200);
    // Then it came with the front-proxy-client certificate, signed by the published requestheader CA
    const client = seenClients.at(-1);
    expect(client?.cn).toBe('front-proxy-client');
    const ca = new X509Certificate(cm.data?.['requestheader-client-ca-file'] ?? '');
    const cert = new X509Certificate(client?.raw ?? Buffer.alloc(0));
    expect(cert.checkIssued(ca) && cert.verify(ca.publicKey)).toBe(true);
  });

  // apiserver pkg/endpoints/filters/authorization.go: the aggregator's proxy comes after authorization, so an
  // aggregated resource needs RBAC like any other; its group-version's discovery is open to every user.
  it('authorizes a request for an aggregated resource before proxying it (403 for the restricted user)', async () => {
    // Given the restricted user, whose RBAC grants nothing in farm.example.com
    seenHeaders.length = 0;
    // When it lists llamas, Then it gets kube-apiserver's 403 and the server sees nothing
    const refused = await rawRequest(
      cluster,
      cluster.restrictedToken,
      'GET',
      '/apis/farm.example.com/v1alpha/namespaces/default/llamas',
    );
    expect(refused.status).toBe(403);
    expect(refused.body.message).toBe(
      'llamas.farm.example.com is forbidden: User "devop-restricted" cannot list resource "llamas" in API group ' +
        '"farm.example.com" in the namespace "default"',
    );
    expect(seenHeaders).toEqual([]);
    // And the group-version's discovery still answers
    const discovery = await rawRequest(cluster, cluster.restrictedToken, 'GET', '/apis/farm.example.com/v1alpha');
    expect(discovery.status).toBe(200);
    expect(seenHeaders.at(-1)?.['x-remote-user']).toEqual(['devop-restricted']);
  });

  for (const v of ['1.31', '1.32', '1.33']) {
    it(`kubectl ${v} discovers the aggregated group and lists llamas`, async () => {
      const env = { ...process.env, KUBECONFIG: cluster.kubeconfigPath, HOME: dir };
      const k = `/usr/lib/google-cloud-sdk/bin/kubectl.${v}`;
      const res = await runFile(k, ['api-resources', '--api-group=farm.example.com'], { env });
      expect(res.stdout).toMatch(/llamas\s+farm\.example\.com\/v1alpha\s+true\s+Llama/);
      const got = await runFile(k, ['get', 'llamas', '-n', 'default', '-o', 'json'], { env });
      expect(JSON.parse(got.stdout).items[0].metadata.name).toBe('dolly');
      const table = await runFile(k, ['get', 'llamas', '-n', 'default'], { env });
      expect(table.stdout).toMatch(/^NAME\s+AGE\ndolly\s+/);
      const svc = await runFile(k, ['get', 'apiservice', 'v1alpha.farm.example.com'], { env });
      expect(svc.stdout).toMatch(/v1alpha\.farm\.example\.com\s+default\/farm\s+True\s+/);
    });
  }

  it('kubectl explain reads an aggregated kind from its server, through the merged /openapi/v3', async () => {
    // Given the APIService's server publishes /openapi/v3 (kube-aggregator pkg/controllers/openapiv3/aggregator
    // merges such an index into the API server's)
    const env = { ...process.env, KUBECONFIG: cluster.kubeconfigPath, HOME: dir };
    // When kubectl explains the aggregated kind
    const r = await runFile('/usr/lib/google-cloud-sdk/bin/kubectl.1.33', ['explain', 'llamas'], { env });
    // Then the index names the group-version with the server's own URL, and the description comes from its document
    expect(r.stdout).toMatch(/GROUP:\s+farm\.example\.com\nKIND:\s+Llama\nVERSION:\s+v1alpha/);
    expect(r.stdout).toContain('A Llama lives on the farm.');
    expect(r.stdout).toMatch(/spec\s+<Object>\n\s+How heavy the llama is\./);
  });

  it('kubectl explain --output plaintext-openapiv2 reads an aggregated kind, through the merged /openapi/v2', async () => {
    // Given the APIService's server publishes /openapi/v2 (kube-aggregator pkg/controllers/openapi/aggregator merges
    // each server's document into the API server's /openapi/v2)
    const env = { ...process.env, KUBECONFIG: cluster.kubeconfigPath, HOME: dir };
    // When kubectl explains the aggregated kind from OpenAPI v2 (the protobuf document kubectl asks for)
    const kubectl = '/usr/lib/google-cloud-sdk/bin/kubectl.1.33';
    const r = await runFile(kubectl, ['explain', 'llamas', '--output', 'plaintext-openapiv2'], { env });
    // Then the description and fields come from the server's v2 document
    expect(r.stdout).toContain('A Llama lives on the farm (v2).');
    expect(r.stdout).toMatch(/spec\s+<map\[string\]>\n\s+How heavy the llama is, in v2\./);
  });
});
