// The farm-operator's HTTPS server on loopback: discovery per step, llamas, farmpods from a fake pod lister, Tables,
// errors.
import { request } from 'node:https';
import type { V1Pod } from '@kubernetes/client-node';
import { afterEach, describe, expect, it } from 'vitest';
import { selfSignedCert } from './cert.js';
import type { PodListOptions, PodLister, PodPage } from './farmpods.js';
import { LlamaStore } from './llamas.js';
import { startFarmServer, type RunningFarmServer } from './server.js';
import type { Step } from './api.js';

const tls = selfSignedCert({ commonName: 'farm-operator', altNames: ['localhost', '127.0.0.1'] });
const KUBECTL_GET_ACCEPT =
  'application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json';

interface Reply {
  status: number;
  contentType: string | undefined;
  body: any;
}

function get(port: number, path: string, headers: Record<string, string> = {}, method = 'GET'): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port, path, method, headers, ca: tls.cert, servername: 'localhost' },
      (res) => {
        let text = '';
        res.on('data', (d) => (text += d.toString()));
        res.on('end', () => {
          const contentType = res.headers['content-type'];
          resolve({
            status: res.statusCode ?? 0,
            contentType,
            body: contentType === 'application/json' ? JSON.parse(text) : text,
          });
        });
      },
    );
    req.on('error', reject);
    req.end();
  });
}

function pod(namespace: string, name: string, containers: number): V1Pod {
  return {
    metadata: { namespace, name, creationTimestamp: new Date('2026-01-01T00:00:00Z'), labels: { app: name } },
    spec: { containers: Array.from({ length: containers }, (_, i) => ({ name: `c${i}`, image: 'busybox' })) },
  };
}

class FakePods implements PodLister {
  readonly calls: { namespace: string | undefined; options: PodListOptions }[] = [];
  constructor(
    private readonly pods: V1Pod[],
    private readonly failure?: Error & { code?: number },
  ) {}
  async list(namespace: string | undefined, options: PodListOptions): Promise<PodPage> {
    this.calls.push({ namespace, options });
    if (this.failure) throw this.failure;
    const items = this.pods.filter((p) => namespace === undefined || p.metadata?.namespace === namespace);
    return { items, metadata: { resourceVersion: '4242', ...(options.limit ? { _continue: 'next-page' } : {}) } };
  }
}

const running: RunningFarmServer[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((s) => s.close()));
});

async function serve(step: Step, pods: PodLister = new FakePods([])): Promise<number> {
  const log: string[] = [];
  const server = await startFarmServer({
    step,
    port: 0,
    host: '127.0.0.1',
    tls,
    llamas: new LlamaStore(),
    pods: () => pods,
    log: (l) => log.push(l),
  });
  running.push(server);
  return server.port;
}

describe('farm-operator discovery', () => {
  it('serves the group, the group list and health at every step', async () => {
    const port = await serve(1);
    const group = await get(port, '/apis/farm.example.com');
    expect(group.body).toMatchObject({
      kind: 'APIGroup',
      name: 'farm.example.com',
      preferredVersion: { groupVersion: 'farm.example.com/v1alpha', version: 'v1alpha' },
    });
    expect((await get(port, '/apis')).body.groups.map((g: { name: string }) => g.name)).toEqual(['farm.example.com']);
    expect(await get(port, '/healthz')).toMatchObject({ status: 200, body: 'ok' });
  });

  it.each([
    [1 as Step, []],
    [2 as Step, ['llamas']],
    [3 as Step, ['llamas', 'farmpods']],
  ])('step %i lists exactly %j in the APIResourceList', async (step, names) => {
    // Given a server at this step
    const port = await serve(step);
    // When the aggregator asks for the group version
    const reply = await get(port, '/apis/farm.example.com/v1alpha');
    // Then it gets the APIResourceList for exactly this step
    expect(reply.status).toBe(200);
    expect(reply.body.kind).toBe('APIResourceList');
    expect(reply.body.groupVersion).toBe('farm.example.com/v1alpha');
    expect(reply.body.resources.map((r: { name: string }) => r.name)).toEqual(names);
  });

  it('describes llamas and farmpods with kind, scope and verbs', async () => {
    const port = await serve(3);
    const { resources } = (await get(port, '/apis/farm.example.com/v1alpha')).body;
    expect(resources).toEqual([
      { name: 'llamas', singularName: 'llama', namespaced: true, kind: 'Llama', verbs: ['get', 'list'] },
      { name: 'farmpods', singularName: 'farmpod', namespaced: true, kind: 'FarmPod', verbs: ['list'] },
    ]);
  });

  it('serves OpenAPI v2 and v3 with the kinds of its step', async () => {
    const port = await serve(2);
    const v2 = (await get(port, '/openapi/v2')).body;
    expect(v2.swagger).toBe('2.0');
    expect(Object.keys(v2.definitions)).toEqual(['com.example.farm.v1alpha.Llama']);
    const index = (await get(port, '/openapi/v3')).body;
    const url: string = index.paths['apis/farm.example.com/v1alpha'].serverRelativeURL;
    const v3 = (await get(port, url)).body;
    expect(v3.openapi).toBe('3.0.0');
    expect(v3.components.schemas['com.example.farm.v1alpha.Llama']['x-kubernetes-group-version-kind']).toEqual([
      { group: 'farm.example.com', version: 'v1alpha', kind: 'Llama' },
    ]);
  });
});

describe('llamas', () => {
  it('are not served at step 1: 404 Status', async () => {
    const port = await serve(1);
    const reply = await get(port, '/apis/farm.example.com/v1alpha/namespaces/default/llamas');
    expect(reply.status).toBe(404);
    expect(reply.body).toMatchObject({ kind: 'Status', status: 'Failure', reason: 'NotFound', code: 404 });
  });

  it('lists the namespace’s llamas from memory', async () => {
    const port = await serve(2);
    const reply = await get(port, '/apis/farm.example.com/v1alpha/namespaces/default/llamas');
    expect(reply.status).toBe(200);
    expect(reply.body.kind).toBe('LlamaList');
    expect(reply.body.apiVersion).toBe('farm.example.com/v1alpha');
    expect(reply.body.items.map((l: { metadata: { name: string } }) => l.metadata.name)).toEqual(['dolly', 'fernando']);
    expect(reply.body.items[0].spec).toEqual({ weight: 130, height: 175 });
  });

  it('lists across namespaces on the cluster-wide path', async () => {
    const port = await serve(2);
    const reply = await get(port, '/apis/farm.example.com/v1alpha/llamas');
    expect(
      reply.body.items.map(
        (l: { metadata: { namespace: string; name: string } }) => `${l.metadata.namespace}/${l.metadata.name}`,
      ),
    ).toEqual(['default/dolly', 'default/fernando', 'kube-system/kuzco']);
  });

  it('gets one llama, and answers a missing one with a NotFound Status that kubectl prints', async () => {
    const port = await serve(3);
    const found = await get(port, '/apis/farm.example.com/v1alpha/namespaces/default/llamas/dolly');
    expect(found.body).toMatchObject({
      apiVersion: 'farm.example.com/v1alpha',
      kind: 'Llama',
      metadata: { name: 'dolly', namespace: 'default' },
      spec: { weight: 130, height: 175 },
    });
    const missing = await get(port, '/apis/farm.example.com/v1alpha/namespaces/default/llamas/nobody');
    expect(missing.status).toBe(404);
    expect(missing.body).toEqual({
      kind: 'Status',
      apiVersion: 'v1',
      metadata: {},
      status: 'Failure',
      code: 404,
      reason: 'NotFound',
      message: 'llamas.farm.example.com "nobody" not found',
      details: { name: 'nobody', group: 'farm.example.com', kind: 'llamas' },
    });
    // A llama of another namespace is not visible here.
    expect((await get(port, '/apis/farm.example.com/v1alpha/namespaces/default/llamas/kuzco')).status).toBe(404);
  });

  it('answers kubectl get’s Table request with columns and partial object metadata', async () => {
    const port = await serve(2);
    const reply = await get(port, '/apis/farm.example.com/v1alpha/namespaces/default/llamas?limit=500', {
      Accept: KUBECTL_GET_ACCEPT,
    });
    expect(reply.body.kind).toBe('Table');
    expect(reply.body.apiVersion).toBe('meta.k8s.io/v1');
    expect(reply.body.columnDefinitions.map((c: { name: string }) => c.name)).toEqual([
      'Name',
      'Weight',
      'Height',
      'Age',
    ]);
    expect(reply.body.rows[1].cells.slice(0, 3)).toEqual(['fernando', 160, 185]);
    // The age is written out by the server (kubectl prints cells as they come), the llamas being seconds old.
    expect(reply.body.rows[1].cells[3]).toMatch(/^\d+s$/);
    expect(reply.body.rows[1].object).toMatchObject({ kind: 'PartialObjectMetadata', metadata: { name: 'fernando' } });
  });

  it('answers the plain object when the client prefers plain JSON', async () => {
    const port = await serve(2);
    const reply = await get(port, '/apis/farm.example.com/v1alpha/namespaces/default/llamas/dolly', {
      Accept: 'application/json, */*',
    });
    expect(reply.body.kind).toBe('Llama');
  });

  it('refuses writes and watches with a 405 Status', async () => {
    const port = await serve(2);
    const del = await get(port, '/apis/farm.example.com/v1alpha/namespaces/default/llamas/dolly', {}, 'DELETE');
    expect(del.status).toBe(405);
    expect(del.body.reason).toBe('MethodNotAllowed');
    expect((await get(port, '/apis/farm.example.com/v1alpha/namespaces/default/llamas?watch=true')).status).toBe(405);
  });
});

describe('farmpods', () => {
  it('are not served before step 3', async () => {
    const pods = new FakePods([pod('default', 'web', 1)]);
    const port = await serve(2, pods);
    expect((await get(port, '/apis/farm.example.com/v1alpha/namespaces/default/farmpods')).status).toBe(404);
    expect(pods.calls).toEqual([]);
  });

  it('are the namespace’s pods: farm-<pod>, containers counted, list metadata passed through', async () => {
    // Given pods in two namespaces
    const pods = new FakePods([pod('default', 'web', 2), pod('default', 'db', 1), pod('other', 'job', 3)]);
    const port = await serve(3, pods);
    // When kubectl lists farmpods in default with its usual page size
    const reply = await get(port, '/apis/farm.example.com/v1alpha/namespaces/default/farmpods?limit=500');
    // Then each pod of default appears as a FarmPod, and the pod list's resourceVersion and continue token come through
    expect(reply.status).toBe(200);
    expect(reply.body).toEqual({
      apiVersion: 'farm.example.com/v1alpha',
      kind: 'FarmPodList',
      metadata: { resourceVersion: '4242', continue: 'next-page' },
      items: [
        {
          apiVersion: 'farm.example.com/v1alpha',
          kind: 'FarmPod',
          metadata: {
            name: 'farm-web',
            namespace: 'default',
            creationTimestamp: '2026-01-01T00:00:00Z',
            labels: { app: 'web' },
          },
          spec: { containers: 2 },
        },
        {
          apiVersion: 'farm.example.com/v1alpha',
          kind: 'FarmPod',
          metadata: {
            name: 'farm-db',
            namespace: 'default',
            creationTimestamp: '2026-01-01T00:00:00Z',
            labels: { app: 'db' },
          },
          spec: { containers: 1 },
        },
      ],
    });
    expect(pods.calls).toEqual([{ namespace: 'default', options: { limit: 500 } }]);
  });

  it('render as a Table with a Containers column', async () => {
    const port = await serve(3, new FakePods([pod('default', 'web', 2)]));
    const reply = await get(port, '/apis/farm.example.com/v1alpha/namespaces/default/farmpods', {
      Accept: KUBECTL_GET_ACCEPT,
    });
    expect(reply.body.columnDefinitions.map((c: { name: string }) => c.name)).toEqual(['Name', 'Containers', 'Age']);
    expect(reply.body.rows[0].cells.slice(0, 2)).toEqual(['farm-web', 2]);
  });

  it('support only list: get of one FarmPod is 405', async () => {
    const port = await serve(3, new FakePods([pod('default', 'web', 2)]));
    expect((await get(port, '/apis/farm.example.com/v1alpha/namespaces/default/farmpods/farm-web')).status).toBe(405);
  });

  it('say which permission is missing when the pod list is forbidden', async () => {
    const forbidden = Object.assign(new Error('pods is forbidden'), { code: 403 });
    const port = await serve(3, new FakePods([], forbidden));
    const reply = await get(port, '/apis/farm.example.com/v1alpha/namespaces/default/farmpods');
    expect(reply.status).toBe(403);
    expect(reply.body.message).toContain('grant it pods list');
  });
});
