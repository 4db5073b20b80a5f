// The stand-in API server through @kubernetes/client-node, unmodified: CRUD, Status errors, selectors, watch + 410,
// patches, garbage collection, finalizers, controllers, CRDs, RBAC policy and APIService aggregation (no node needed).
import {
  AppsApi,
  AppsV1Api,
  BatchV1Api,
  CoreV1Api,
  CustomObjectsApi,
  ApiextensionsV1Api,
  KubeConfig,
  PatchStrategy,
  VersionApi,
  Watch,
  makeInformer,
  setHeaderOptions,
  type V1Job,
  type V1Pod,
} from '@kubernetes/client-node';
import { readFileSync } from 'node:fs';
import https from 'node:https';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { expectStatus } from '../../testkit/api-requests.js';
import { waitFor } from '../../testkit/wait.js';

let cluster: ClusterHandle;
let kc: KubeConfig;
let core: CoreV1Api;
let apps: AppsV1Api;
const ns = 'default';

const pod = (name: string, labels: Record<string, string> = {}): V1Pod => ({
  metadata: { name, labels },
  spec: { containers: [{ name: 'main', image: 'busybox', command: ['sleep', '3600'] }] },
});

beforeAll(async () => {
  cluster = await startCluster({ kubelet: false });
  kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfigPath);
  core = kc.makeApiClient(CoreV1Api);
  apps = kc.makeApiClient(AppsV1Api);
});

afterAll(async () => {
  await cluster?.stop();
});

describe('stand-in API with client-node', () => {
  it('serves version and a fresh cluster: namespaces, default service accounts, the kubernetes Service, the node', async () => {
    const v = await kc.makeApiClient(VersionApi).getCode();
    expect(v.gitVersion).toMatch(/^v1\.\d+\.\d+/);
    const group = await kc.makeApiClient(AppsApi).getAPIGroup();
    expect(group.preferredVersion?.groupVersion).toBe('apps/v1');
    const resources = await apps.getAPIResources();
    expect(resources.resources.find((r) => r.name === 'deployments/scale')).toMatchObject({
      kind: 'Scale',
      group: 'autoscaling',
      version: 'v1',
    });
    const nss = (await core.listNamespace()).items.map((n) => n.metadata?.name);
    expect(nss).toEqual(expect.arrayContaining(['default', 'kube-system']));
    const sa = await core.readNamespacedServiceAccount({ name: 'default', namespace: 'kube-system' });
    expect(sa.metadata?.uid).toBeTruthy();
    const svc = await core.readNamespacedService({ name: 'kubernetes', namespace: 'default' });
    expect(svc.spec?.clusterIP).toMatch(/^10\.\d+\.\d+\.1$/);
    const node = await core.readNode({ name: cluster.nodeName });
    expect(node.status?.addresses?.find((a) => a.type === 'InternalIP')?.address).toBe(cluster.nodeIP);
    expect(node.status?.nodeInfo?.containerRuntimeVersion).toMatch(/^containerd:\/\/1\.7\./);
  });

  it('creates, reads, lists with selectors, and answers errors with Status bodies', async () => {
    const created = await core.createNamespacedPod({ namespace: ns, body: pod('sel-a', { app: 'a', tier: 'web' }) });
    expect(created.metadata?.uid).toBeTruthy();
    expect(created.metadata?.creationTimestamp).toBeTruthy();
    expect(created.status?.phase).toBe('Pending');
    await core.createNamespacedPod({ namespace: ns, body: pod('sel-b', { app: 'b', tier: 'web' }) });
    await core.createNamespacedPod({ namespace: ns, body: pod('sel-c', { app: 'c' }) });

    const names = async (q: { labelSelector?: string; fieldSelector?: string }) =>
      (await core.listNamespacedPod({ namespace: ns, ...q })).items
        .map((p) => p.metadata?.name)
        .filter((n) => n?.startsWith('sel-'))
        .sort();
    expect(await names({ labelSelector: 'app=a' })).toEqual(['sel-a']);
    expect(await names({ labelSelector: 'app!=a' })).toEqual(['sel-b', 'sel-c']);
    expect(await names({ labelSelector: 'app in (a,c)' })).toEqual(['sel-a', 'sel-c']);
    expect(await names({ labelSelector: 'app notin (a,c),tier' })).toEqual(['sel-b']);
    expect(await names({ labelSelector: '!tier' })).toEqual(['sel-c']);
    expect(await names({ fieldSelector: 'metadata.name=sel-b' })).toEqual(['sel-b']);
    expect(await names({ fieldSelector: 'status.phase=Pending,metadata.name!=sel-b', labelSelector: 'tier' })).toEqual([
      'sel-a',
    ]);

    const dup = await expectStatus(core.createNamespacedPod({ namespace: ns, body: pod('sel-a') }));
    expect(dup).toMatchObject({ code: 409, reason: 'AlreadyExists', message: 'pods "sel-a" already exists' });
    const missing = await expectStatus(core.readNamespacedPod({ name: 'nope', namespace: ns }));
    expect(missing).toMatchObject({ code: 404, reason: 'NotFound', message: 'pods "nope" not found' });
    const fresh = await core.readNamespacedPod({ name: 'sel-a', namespace: ns });
    const stale = { ...fresh, metadata: { ...fresh.metadata, labels: { app: 'z' } } };
    const replaced = await core.replaceNamespacedPod({
      name: 'sel-a',
      namespace: ns,
      body: { ...fresh, metadata: { ...fresh.metadata, labels: { app: 'a2', tier: 'web' } } },
    });
    expect(Number(replaced.metadata?.resourceVersion)).toBeGreaterThan(Number(fresh.metadata?.resourceVersion));
    const conflict = await expectStatus(core.replaceNamespacedPod({ name: 'sel-a', namespace: ns, body: stale }));
    expect(conflict.code).toBe(409);
    expect(conflict.reason).toBe('Conflict');
    const bad = await expectStatus(
      core.createNamespacedPod({
        namespace: ns,
        body: { metadata: { name: 'Bad_Name' }, spec: { containers: [{ name: 'm', image: 'x' }] } },
      }),
    );
    expect(bad).toMatchObject({ code: 422, reason: 'Invalid' });
    const noNs = await expectStatus(
      core.createNamespacedConfigMap({ namespace: 'nowhere', body: { metadata: { name: 'x' } } }),
    );
    expect(noNs).toMatchObject({ code: 404, reason: 'NotFound', message: 'namespaces "nowhere" not found' });
  });

  it('streams watch events in order and resumes from a resourceVersion', async () => {
    const list = await core.listNamespacedConfigMap({ namespace: ns });
    const events: string[] = [];
    const watch = new Watch(kc);
    const req = await watch.watch(
      `/api/v1/namespaces/${ns}/configmaps`,
      { resourceVersion: list.metadata?.resourceVersion, labelSelector: 'w=1' },
      (type, obj) => events.push(`${type} ${obj.metadata.name} ${obj.data?.k ?? ''}`),
      () => undefined,
    );
    await core.createNamespacedConfigMap({
      namespace: ns,
      body: { metadata: { name: 'w1', labels: { w: '1' } }, data: { k: 'a' } },
    });
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'w-other' }, data: { k: 'x' } } });
    await core.patchNamespacedConfigMap(
      { name: 'w1', namespace: ns, body: { data: { k: 'b' } } },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
    await core.deleteNamespacedConfigMap({ name: 'w1', namespace: ns });
    await waitFor('three watch events', () => events.length >= 3);
    req.abort();
    expect(events).toEqual(['ADDED w1 a', 'MODIFIED w1 b', 'DELETED w1 b']);
  });

  it('answers a watch from a compacted resourceVersion with 410 Gone, and an informer re-lists through it', async () => {
    const path = `/api/v1/namespaces/${ns}/pods`;
    const informer = makeInformer(
      kc,
      path,
      () => core.listNamespacedPod({ namespace: ns, labelSelector: 'inf=1' }),
      'inf=1',
    );
    const seen = new Set<string>();
    informer.on('add', (p) => seen.add(p.metadata!.name!));
    await informer.start();
    await core.createNamespacedPod({ namespace: ns, body: pod('inf-1', { inf: '1' }) });
    await waitFor('informer sees inf-1', () => seen.has('inf-1'));
    const oldRv = (await core.listNamespacedPod({ namespace: ns })).metadata!.resourceVersion!;
    await core.createNamespacedPod({ namespace: ns, body: pod('inf-2', { inf: '1' }) });
    await waitFor('informer sees inf-2', () => seen.has('inf-2'));

    cluster.compactWatchHistory();
    const errors: any[] = [];
    const ended = new Promise<void>((resolve) => {
      void new Watch(kc).watch(
        path,
        { resourceVersion: oldRv },
        (type, obj) => type === 'ERROR' && errors.push(obj),
        () => resolve(),
      );
    });
    await ended;
    expect(errors[0]).toMatchObject({ kind: 'Status', code: 410, reason: 'Expired' });

    await core.createNamespacedPod({ namespace: ns, body: pod('inf-3', { inf: '1' }) });
    await waitFor('informer re-lists and sees inf-3', () => seen.has('inf-3'));
    expect(
      informer
        .list(ns)
        .map((p) => p.metadata?.name)
        .sort(),
    ).toEqual(['inf-1', 'inf-2', 'inf-3']);
    await informer.stop();
  });

  it('applies merge, JSON and strategic merge patches (containers and env merged by name)', async () => {
    await apps.createNamespacedDeployment({
      namespace: ns,
      body: {
        metadata: { name: 'patchy' },
        spec: {
          replicas: 0,
          selector: { matchLabels: { app: 'patchy' } },
          template: {
            metadata: { labels: { app: 'patchy' } },
            spec: {
              containers: [
                {
                  name: 'a',
                  image: 'busybox',
                  env: [
                    { name: 'X', value: '1' },
                    { name: 'Y', value: '2' },
                  ],
                },
                { name: 'b', image: 'busybox' },
              ],
            },
          },
        },
      },
    });
    const smp = await apps.patchNamespacedDeployment(
      {
        name: 'patchy',
        namespace: ns,
        body: {
          spec: {
            template: {
              spec: {
                containers: [
                  {
                    name: 'a',
                    env: [
                      { name: 'Y', value: '3' },
                      { name: 'Z', value: '4' },
                    ],
                  },
                ],
              },
            },
          },
        },
      },
      setHeaderOptions('Content-Type', PatchStrategy.StrategicMergePatch),
    );
    const containers = smp.spec!.template.spec!.containers;
    expect(containers.map((c) => c.name)).toEqual(['a', 'b']);
    expect(containers[0].env).toEqual([
      { name: 'X', value: '1' },
      { name: 'Y', value: '3' },
      { name: 'Z', value: '4' },
    ]);
    expect(smp.metadata?.generation).toBe(2);
    const jp = await apps.patchNamespacedDeployment(
      {
        name: 'patchy',
        namespace: ns,
        body: [{ op: 'replace', path: '/spec/template/spec/containers/1/image', value: 'devop.test/shell' }],
      },
      setHeaderOptions('Content-Type', PatchStrategy.JsonPatch),
    );
    expect(jp.spec!.template.spec!.containers[1].image).toBe('devop.test/shell');
    const mp = await apps.patchNamespacedDeployment(
      { name: 'patchy', namespace: ns, body: { metadata: { labels: { m: 'y' } } } },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
    expect(mp.metadata?.labels).toEqual({ m: 'y' });
    expect(mp.metadata?.generation).toBe(3);
  });

  it(
    'runs deployments: replica sets with pod-template-hash, scheduled pods, rolling replace, scale, cascading ' +
      'delete',
    async () => {
      await apps.createNamespacedDeployment({
        namespace: ns,
        body: {
          metadata: { name: 'web' },
          spec: {
            replicas: 2,
            selector: { matchLabels: { app: 'web' } },
            template: {
              metadata: { labels: { app: 'web' } },
              spec: { containers: [{ name: 'web', image: 'devop.test/http-echo' }] },
            },
          },
        },
      });
      const webPods = async () => (await core.listNamespacedPod({ namespace: ns, labelSelector: 'app=web' })).items;
      const pods = await waitFor('2 web pods bound to the node', async () => {
        const p = await webPods();
        return p.length === 2 && p.every((x) => x.spec?.nodeName === cluster.nodeName) ? p : undefined;
      });
      expect(pods[0].status?.conditions?.find((c) => c.type === 'PodScheduled')?.status).toBe('True');
      expect(pods[0].metadata?.ownerReferences?.[0]).toMatchObject({ kind: 'ReplicaSet', controller: true });
      const rs1 = (await apps.listNamespacedReplicaSet({ namespace: ns, labelSelector: 'app=web' })).items;
      expect(rs1).toHaveLength(1);
      const hash = rs1[0].metadata!.labels!['pod-template-hash'];
      expect(rs1[0].metadata?.name).toBe(`web-${hash}`);

      await apps.patchNamespacedDeployment(
        {
          name: 'web',
          namespace: ns,
          body: { spec: { template: { spec: { containers: [{ name: 'web', image: 'devop.test/http-echo:v2' }] } } } },
        },
        setHeaderOptions('Content-Type', PatchStrategy.StrategicMergePatch),
      );
      await waitFor('pods of the new template only', async () => {
        const p = await webPods();
        return p.length === 2 && p.every((x) => x.spec?.containers[0].image === 'devop.test/http-echo:v2');
      });
      await apps.patchNamespacedDeploymentScale(
        { name: 'web', namespace: ns, body: { spec: { replicas: 3 } } },
        setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
      );
      await waitFor('3 pods after scale', async () => (await webPods()).length === 3);
      const d = await waitFor('status observed', async () => {
        const x = await apps.readNamespacedDeployment({ name: 'web', namespace: ns });
        return x.status?.observedGeneration === x.metadata?.generation && x.status?.replicas === 3 ? x : undefined;
      });
      expect(d.metadata?.annotations?.['deployment.kubernetes.io/revision']).toBe('2');
      const events = (
        await core.listNamespacedEvent({
          namespace: ns,
          fieldSelector: 'involvedObject.kind=Deployment,involvedObject.name=web',
        })
      ).items;
      expect(events.map((e) => e.reason)).toContain('ScalingReplicaSet');

      await apps.deleteNamespacedDeployment({ name: 'web', namespace: ns, propagationPolicy: 'Foreground' });
      const pending = await apps.readNamespacedDeployment({ name: 'web', namespace: ns }).catch(() => undefined);
      if (pending) expect(pending.metadata?.finalizers).toContain('foregroundDeletion');
      await waitFor('deployment, replica sets and pods gone', async () => {
        const [dl, rl, pl] = await Promise.all([
          apps.listNamespacedDeployment({ namespace: ns }),
          apps.listNamespacedReplicaSet({ namespace: ns, labelSelector: 'app=web' }),
          webPods(),
        ]);
        return !dl.items.some((x) => x.metadata?.name === 'web') && rl.items.length === 0 && pl.length === 0;
      });
    },
  );

  it('orphans dependents on request, and deletes a namespace with everything in it', async () => {
    await core.createNamespace({ body: { metadata: { name: 'scratch' } } });
    await apps.createNamespacedReplicaSet({
      namespace: 'scratch',
      body: {
        metadata: { name: 'keepers' },
        spec: {
          replicas: 2,
          selector: { matchLabels: { app: 'k' } },
          template: { metadata: { labels: { app: 'k' } }, spec: { containers: [{ name: 'c', image: 'busybox' }] } },
        },
      },
    });
    const pods = async () => (await core.listNamespacedPod({ namespace: 'scratch' })).items;
    await waitFor('2 pods', async () => (await pods()).length === 2);
    await apps.deleteNamespacedReplicaSet({ name: 'keepers', namespace: 'scratch', propagationPolicy: 'Orphan' });
    await waitFor(
      'replica set gone',
      async () => (await apps.listNamespacedReplicaSet({ namespace: 'scratch' })).items.length === 0,
    );
    const orphans = await waitFor('pods without owner', async () => {
      const p = await pods();
      return p.length === 2 && p.every((x) => !x.metadata?.ownerReferences?.length) ? p : undefined;
    });
    expect(orphans).toHaveLength(2);

    await core.deleteNamespace({ name: 'scratch' });
    const terminating = await core.readNamespace({ name: 'scratch' }).catch(() => undefined);
    if (terminating) expect(terminating.status?.phase).toBe('Terminating');
    const refused = await expectStatus(
      core.createNamespacedConfigMap({ namespace: 'scratch', body: { metadata: { name: 'late' } } }),
    ).catch(() => ({ code: 404 }));
    expect([403, 404]).toContain(refused.code);
    await waitFor('namespace gone', async () =>
      (await core.listNamespace()).items.every((n) => n.metadata?.name !== 'scratch'),
    );
    expect(await pods()).toHaveLength(0);
  });

  it('honours finalizers: deletionTimestamp first, removal once the last finalizer goes', async () => {
    await core.createNamespacedConfigMap({
      namespace: ns,
      body: { metadata: { name: 'fin', finalizers: ['example.com/hold'] } },
    });
    await core.deleteNamespacedConfigMap({ name: 'fin', namespace: ns });
    const held = await core.readNamespacedConfigMap({ name: 'fin', namespace: ns });
    expect(held.metadata?.deletionTimestamp).toBeTruthy();
    await core.patchNamespacedConfigMap(
      { name: 'fin', namespace: ns, body: [{ op: 'remove', path: '/metadata/finalizers' }] },
      setHeaderOptions('Content-Type', PatchStrategy.JsonPatch),
    );
    expect((await expectStatus(core.readNamespacedConfigMap({ name: 'fin', namespace: ns }))).code).toBe(404);
  });

  it('runs jobs to completion and deletes them after ttlSecondsAfterFinished', async () => {
    const batch = kc.makeApiClient(BatchV1Api);
    // A watch sees every state of the Job in order: its TTL (1 s) may delete it before a poll would read it complete.
    const seen: { type: string; complete: boolean; succeeded?: number }[] = [];
    const list = await batch.listNamespacedJob({ namespace: ns });
    const watching = await new Watch(kc).watch(
      `/apis/batch/v1/namespaces/${ns}/jobs`,
      { resourceVersion: list.metadata?.resourceVersion },
      (type, job: V1Job) => {
        if (job.metadata?.name !== 'once') return;
        const complete = job.status?.conditions?.some((c) => c.type === 'Complete' && c.status === 'True') ?? false;
        seen.push({ type, complete, succeeded: job.status?.succeeded });
      },
      () => undefined,
    );
    try {
      await batch.createNamespacedJob({
        namespace: ns,
        body: {
          metadata: { name: 'once' },
          spec: {
            ttlSecondsAfterFinished: 1,
            template: {
              spec: { restartPolicy: 'Never', containers: [{ name: 'c', image: 'busybox', command: ['true'] }] },
            },
          },
        },
      });
      const p = await waitFor(
        'job pod',
        async () => (await core.listNamespacedPod({ namespace: ns, labelSelector: 'job-name=once' })).items[0],
      );
      // Acting as the node: the container ran and exited 0.
      await core.patchNamespacedPodStatus(
        { name: p.metadata!.name!, namespace: ns, body: { status: { phase: 'Succeeded' } } },
        setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
      );
      // Then the Job completes with one success, and its TTL deletes it afterwards
      await waitFor('job deleted by its TTL', async () => seen.some((e) => e.type === 'DELETED') || undefined);
      const completeAt = seen.findIndex((e) => e.complete);
      expect(completeAt, JSON.stringify(seen)).toBeGreaterThanOrEqual(0);
      expect(seen[completeAt].succeeded).toBe(1);
      expect(seen.findIndex((e) => e.type === 'DELETED')).toBeGreaterThan(completeAt);
    } finally {
      watching.abort();
    }
  });

  it('serves custom resources once their CRD exists, with a status subresource', async () => {
    const ext = kc.makeApiClient(ApiextensionsV1Api);
    await ext.createCustomResourceDefinition({
      body: {
        metadata: { name: 'echoes.example.com' },
        spec: {
          group: 'example.com',
          scope: 'Namespaced',
          names: { plural: 'echoes', singular: 'echo', kind: 'Echo', shortNames: ['echo'] },
          versions: [
            {
              name: 'v1',
              served: true,
              storage: true,
              subresources: { status: {} },
              schema: { openAPIV3Schema: { type: 'object', x_kubernetes_preserve_unknown_fields: true } },
            },
          ],
        },
      },
    });
    const co = kc.makeApiClient(CustomObjectsApi);
    const created: any = await co.createNamespacedCustomObject({
      group: 'example.com',
      version: 'v1',
      namespace: ns,
      plural: 'echoes',
      body: {
        apiVersion: 'example.com/v1',
        kind: 'Echo',
        metadata: { name: 'e1' },
        spec: { replicas: 2 },
        status: { ignored: true },
      },
    });
    expect(created.status).toBeUndefined();
    const withStatus: any = await co.replaceNamespacedCustomObjectStatus({
      group: 'example.com',
      version: 'v1',
      namespace: ns,
      plural: 'echoes',
      name: 'e1',
      body: { ...created, spec: { replicas: 9 }, status: { ready: 2 } },
    });
    expect(withStatus.status).toEqual({ ready: 2 });
    expect(withStatus.spec).toEqual({ replicas: 2 });
    const patched: any = await co.patchNamespacedCustomObject(
      {
        group: 'example.com',
        version: 'v1',
        namespace: ns,
        plural: 'echoes',
        name: 'e1',
        body: { spec: { replicas: 3 } },
      },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
    expect(patched.spec.replicas).toBe(3);
    expect(patched.status).toEqual({ ready: 2 });
    expect(patched.metadata.generation).toBe(2);
    const list: any = await co.listNamespacedCustomObject({
      group: 'example.com',
      version: 'v1',
      namespace: ns,
      plural: 'echoes',
    });
    expect(list.kind).toBe('EchoList');
    expect(list.items.map((i: any) => i.metadata.name)).toEqual(['e1']);
    const strategic = await expectStatus(
      co.patchNamespacedCustomObject(
        {
          group: 'example.com',
          version: 'v1',
          namespace: ns,
          plural: 'echoes',
          name: 'e1',
          body: { spec: { replicas: 4 } },
        },
        setHeaderOptions('Content-Type', PatchStrategy.StrategicMergePatch),
      ),
    );
    expect(strategic).toMatchObject({ code: 415, reason: 'UnsupportedMediaType' });

    await ext.deleteCustomResourceDefinition({ name: 'echoes.example.com' });
    expect(
      (
        await expectStatus(
          co.listNamespacedCustomObject({ group: 'example.com', version: 'v1', namespace: ns, plural: 'echoes' }),
        )
      ).code,
    ).toBe(404);
  });

  it('enforces the restricted token policy with kube-apiserver Forbidden bodies', async () => {
    const rkc = new KubeConfig();
    rkc.loadFromFile(cluster.restrictedKubeconfigPath);
    const rcore = rkc.makeApiClient(CoreV1Api);
    expect((await rcore.listNamespacedPod({ namespace: ns })).items.length).toBeGreaterThan(0);
    const denied = await expectStatus(
      rkc.makeApiClient(BatchV1Api).createNamespacedJob({
        namespace: ns,
        body: {
          metadata: { name: 'x' },
          spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'c', image: 'busybox' }] } } },
        },
      }),
    );
    expect(denied).toMatchObject({
      code: 403,
      reason: 'Forbidden',
      message:
        'jobs.batch is forbidden: User "devop-restricted" cannot create resource "jobs" in API group "batch" in the ' +
        'namespace "default"',
    });
    const other = await expectStatus(rcore.listNamespacedPod({ namespace: 'kube-system' }));
    expect(other.code).toBe(403);
    const bad = new KubeConfig();
    bad.loadFromOptions({
      clusters: [{ ...rkc.getCurrentCluster()!, name: 'c' }],
      users: [{ name: 'u', token: 'wrong' }],
      contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
      currentContext: 'x',
    });
    expect((await expectStatus(bad.makeApiClient(CoreV1Api).listNamespacedPod({ namespace: ns }))).code).toBe(401);
    // client-node drops 401 bodies; read it on the wire.
    const raw = await new Promise<{ code?: number; body: string }>((resolve, reject) => {
      https
        .get(
          `${cluster.server}/api/v1/namespaces/default/pods`,
          { ca: readFileSync(cluster.caPath), headers: { authorization: 'Bearer wrong' } },
          (res) => {
            let body = '';
            res.on('data', (d) => (body += d));
            res.on('end', () => resolve({ code: res.statusCode, body }));
          },
        )
        .on('error', reject);
    });
    expect(raw.code).toBe(401);
    expect(JSON.parse(raw.body)).toEqual({
      kind: 'Status',
      apiVersion: 'v1',
      metadata: {},
      status: 'Failure',
      message: 'Unauthorized',
      reason: 'Unauthorized',
      code: 401,
    });
  });
});
