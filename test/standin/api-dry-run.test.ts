// dryRun=All on the stand-in, as kube-apiserver does it: create, update, patch and delete are validated, defaulted and
// answered with the object as it would be, and nothing is stored (no watch event, no resourceVersion step).
import {
  AppsV1Api,
  CoreV1Api,
  KubeConfig,
  PatchStrategy,
  setHeaderOptions,
  type V1ConfigMap,
} from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { expectStatus, rawRequest } from '../../testkit/api-requests.js';

let cluster: ClusterHandle;
let core: CoreV1Api;
let apps: AppsV1Api;
const namespace = 'default';
const dryRun = 'All';

beforeAll(async () => {
  cluster = await startCluster({ kubelet: false });
  const kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfigPath);
  core = kc.makeApiClient(CoreV1Api);
  apps = kc.makeApiClient(AppsV1Api);
});

afterAll(async () => {
  await cluster?.stop();
});

/** The list's resourceVersion: it moves on every stored write, and only then. */
const listVersion = async (): Promise<string | undefined> =>
  (await core.listNamespacedConfigMap({ namespace })).metadata?.resourceVersion;

describe('stand-in API: dryRun=All', () => {
  it('create answers the defaulted would-be object and stores nothing', async () => {
    const before = await listVersion();
    // When a Deployment is created with dryRun=All
    const created = await apps.createNamespacedDeployment({
      namespace,
      dryRun,
      body: {
        metadata: { name: 'dry-deploy' },
        spec: {
          selector: { matchLabels: { app: 'dry' } },
          template: { metadata: { labels: { app: 'dry' } }, spec: { containers: [{ name: 'c', image: 'busybox' }] } },
        },
      },
    });
    // Then the answer is the object as it would be stored: uid, generation and defaults, no resourceVersion
    expect(created.metadata?.uid).toBeTruthy();
    expect(created.metadata?.generation).toBe(1);
    expect(created.metadata?.resourceVersion).toBeUndefined();
    expect(created.spec?.replicas).toBe(1);
    // And nothing exists, no stored write happened
    expect((await expectStatus(apps.readNamespacedDeployment({ name: 'dry-deploy', namespace }))).code).toBe(404);
    expect(await listVersion()).toBe(before);
    // And validation still runs: a bad name is refused as it would be without dryRun
    const invalid = await expectStatus(
      core.createNamespacedConfigMap({ namespace, dryRun, body: { metadata: { name: 'Not_Valid' } } }),
    );
    expect(invalid.code).toBe(422);
  });

  it('update, patch and delete answer the would-be object and leave the stored one as it was', async () => {
    // Given a stored ConfigMap with a finalizer
    const stored = await core.createNamespacedConfigMap({
      namespace,
      body: { metadata: { name: 'dry-cm', finalizers: ['example.com/hold'] }, data: { a: '1' } },
    });
    const version = await listVersion();

    // When it is replaced, patched and deleted with dryRun=All
    const replaced = await core.replaceNamespacedConfigMap({
      name: 'dry-cm',
      namespace,
      dryRun,
      body: { ...stored, data: { a: '2' } } as V1ConfigMap,
    });
    const patched = await core.patchNamespacedConfigMap(
      { name: 'dry-cm', namespace, dryRun, body: { data: { b: '3' } } },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
    await core.deleteNamespacedConfigMap({ name: 'dry-cm', namespace, dryRun });

    // Then each answer is what the write would have made
    expect(replaced.data).toEqual({ a: '2' });
    expect(patched.data).toEqual({ a: '1', b: '3' });
    // And the stored object did not change, nor did the store
    const now = await core.readNamespacedConfigMap({ name: 'dry-cm', namespace });
    expect(now.data).toEqual({ a: '1' });
    expect(now.metadata?.deletionTimestamp).toBeUndefined();
    expect(now.metadata?.resourceVersion).toBe(stored.metadata?.resourceVersion);
    expect(await listVersion()).toBe(version);
    // And a conflict is still a conflict
    const stale = await expectStatus(
      core.replaceNamespacedConfigMap({
        name: 'dry-cm',
        namespace,
        dryRun,
        body: { ...stored, metadata: { ...stored.metadata, resourceVersion: '1' } } as V1ConfigMap,
      }),
    );
    expect(stale.code).toBe(409);
  });

  it('a dry-run delete answers the object as the delete would leave it (a pod: typed answers keep it)', async () => {
    // Given a pod held by a finalizer
    await core.createNamespacedPod({
      namespace,
      body: {
        metadata: { name: 'dry-pod', finalizers: ['example.com/hold'] },
        spec: { containers: [{ name: 'c', image: 'busybox' }] },
      },
    });
    // When it is deleted with dryRun=All
    const answer = await core.deleteNamespacedPod({ name: 'dry-pod', namespace, dryRun });
    // Then the answer carries the deletionTimestamp, the stored pod does not
    expect(answer.metadata?.deletionTimestamp).toBeTruthy();
    const stored = await core.readNamespacedPod({ name: 'dry-pod', namespace });
    expect(stored.metadata?.deletionTimestamp).toBeUndefined();
  });

  it('a dry-run delete without finalizers keeps the object', async () => {
    await core.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'dry-gone' } } });
    await core.deleteNamespacedConfigMap({ name: 'dry-gone', namespace, dryRun });
    expect((await core.readNamespacedConfigMap({ name: 'dry-gone', namespace })).metadata?.name).toBe('dry-gone');
  });

  it('an update is defaulted as a create is: a Deployment replaced with only what a controller sets', async () => {
    // Given a Deployment created from a bare spec
    const bare = (replicas: number) => ({
      metadata: { name: 'dry-defaults' },
      spec: {
        replicas,
        selector: { matchLabels: { app: 'dd' } },
        template: { metadata: { labels: { app: 'dd' } }, spec: { containers: [{ name: 'c', image: 'busybox' }] } },
      },
    });
    const created = await apps.createNamespacedDeployment({ namespace, body: bare(1) });
    // When it is replaced with the same bare spec and 2 replicas, dry run and for real
    const dry = await apps.replaceNamespacedDeployment({ name: 'dry-defaults', namespace, dryRun, body: bare(2) });
    const stored = await apps.replaceNamespacedDeployment({ name: 'dry-defaults', namespace, body: bare(2) });
    // Then both answers carry the defaults the create gave: only replicas changed
    for (const answer of [dry, stored]) {
      expect(answer.spec?.replicas).toBe(2);
      expect(answer.spec?.strategy).toEqual(created.spec?.strategy);
      expect(answer.spec?.template).toEqual(created.spec?.template);
    }
  });
});

/** The store's resourceVersion once the controllers stopped writing (it moves on every stored write, only then). */
async function settledVersion(): Promise<number> {
  const store = cluster.controlPlane.objects.store;
  let last = store.currentRV();
  for (;;) {
    await new Promise((r) => setTimeout(r, 400));
    if (store.currentRV() === last) return last;
    last = store.currentRV();
  }
}

const ns = `/api/v1/namespaces/${namespace}`;
const deployments = `/apis/apps/v1/namespaces/${namespace}/deployments`;
const MERGE = { 'content-type': 'application/merge-patch+json' };

/** Every write the stand-in serves on a subresource or with a side effect, with `dryRun` in its query (or body). */
function subresourceWrites(dryRunValue: string): [string, string, string, object, Record<string, string>?][] {
  const q = `dryRun=${dryRunValue}`;
  return [
    [
      'PUT',
      `${deployments}/sub-deploy/scale?${q}`,
      'scale',
      { metadata: { name: 'sub-deploy' }, spec: { replicas: 5 } },
    ],
    ['PATCH', `${deployments}/sub-deploy/scale?${q}`, 'scale patch', { spec: { replicas: 6 } }, MERGE],
    ['PATCH', `${deployments}/sub-deploy/status?${q}`, 'status', { status: { observedGeneration: 42 } }, MERGE],
    ['PATCH', `${ns}/pods/sub-pod/status?${q}`, 'pod status', { status: { phase: 'Failed' } }, MERGE],
    [
      'PATCH',
      `${ns}/pods/sub-pod/ephemeralcontainers?${q}`,
      'ephemeralcontainers',
      { spec: { ephemeralContainers: [{ name: 'debug', image: 'busybox' }] } },
      MERGE,
    ],
    ['POST', `${ns}/pods/sub-pod/binding?${q}`, 'binding', { metadata: { name: 'sub-pod' }, target: { name: 'n1' } }],
    [
      'POST',
      `${ns}/pods/sub-pod/eviction?${q}`,
      'eviction',
      { apiVersion: 'policy/v1', kind: 'Eviction', metadata: { name: 'sub-pod' } },
    ],
    ['PUT', `/api/v1/namespaces/sub-ns/finalize?${q}`, 'finalize', { metadata: { name: 'sub-ns' }, spec: {} }],
    ['DELETE', `/api/v1/namespaces/sub-ns?${q}`, 'namespace delete', { kind: 'DeleteOptions', dryRun: [dryRunValue] }],
    ['DELETE', `${ns}/configmaps?labelSelector=set%3Dsub&${q}`, 'deletecollection (query)', undefined as never],
    [
      'DELETE',
      `${ns}/configmaps/sub-owner`,
      'cascading delete (body)',
      { kind: 'DeleteOptions', propagationPolicy: 'Foreground', dryRun: [dryRunValue] },
    ],
    ['DELETE', `${ns}/pods/sub-pod?gracePeriodSeconds=0&${q}`, 'pod delete', undefined as never],
    ['PATCH', `${deployments}/sub-applied?${q}&fieldManager=t`, 'apply create', applied(), { 'content-type': APPLY }],
  ];
}

const APPLY = 'application/apply-patch+yaml';
const applied = () => ({
  apiVersion: 'apps/v1',
  kind: 'Deployment',
  metadata: { name: 'sub-applied' },
  spec: {
    selector: { matchLabels: { app: 'applied' } },
    template: { metadata: { labels: { app: 'applied' } }, spec: { containers: [{ name: 'c', image: 'busybox' }] } },
  },
});

describe('stand-in API: dryRun on every write subresource (create.go, update.go, patch.go, delete.go)', () => {
  // kube-apiserver runs every subresource write through the same handlers: the query's options are validated
  // (ValidateDryRun) and a dry run reaches the registry with DryRun set, which stores nothing
  // (k8s.io/apiserver pkg/registry/generic/registry/dryrun.go); an Eviction takes the query's dryRun into its
  // DeleteOptions (kubernetes pkg/registry/core/pod/storage/eviction.go propagateDryRun).
  beforeAll(async () => {
    const admin = cluster.adminToken;
    await apps.createNamespacedDeployment({
      namespace,
      body: {
        metadata: { name: 'sub-deploy' },
        spec: {
          replicas: 1,
          selector: { matchLabels: { app: 'sub' } },
          template: { metadata: { labels: { app: 'sub' } }, spec: { containers: [{ name: 'c', image: 'busybox' }] } },
        },
      },
    });
    await core.createNamespacedPod({
      namespace,
      // A pod for a scheduler that does not run here stays unbound, so that its binding can be written.
      body: {
        metadata: { name: 'sub-pod' },
        spec: { schedulerName: 'elsewhere', containers: [{ name: 'c', image: 'busybox' }] },
      },
    });
    await core.createNamespace({ body: { metadata: { name: 'sub-ns' } } });
    const owner = await core.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'sub-owner' } } });
    const ownerReferences = [{ apiVersion: 'v1', kind: 'ConfigMap', name: 'sub-owner', uid: owner.metadata!.uid! }];
    await core.createNamespacedConfigMap({
      namespace,
      body: { metadata: { name: 'sub-dependent', labels: { set: 'sub' }, ownerReferences } },
    });
    expect((await rawRequest(cluster, admin, 'GET', `${ns}/configmaps/sub-dependent`)).status).toBe(200);
  });

  it('dryRun=All: each answers as the write would, and nothing is stored, cascaded or killed', async () => {
    // Given the objects above, once the controllers are done with them
    const before = await settledVersion();
    const pod = await core.readNamespacedPod({ name: 'sub-pod', namespace });
    // When each subresource write is sent with dryRun=All
    for (const [method, path, what, body, headers] of subresourceWrites('All')) {
      const answer = await rawRequest(cluster, cluster.adminToken, method, path, body, headers);
      // Then it is answered as a success
      expect([what, answer.status < 300], answer.text).toEqual([what, true]);
    }
    // And nothing was stored: the store's resourceVersion has not moved, even after the controllers had time to react
    expect(await settledVersion()).toBe(before);
    // And the objects are as they were: no scale, no binding, no deletion, no cascade, no new object
    const deploy = await apps.readNamespacedDeployment({ name: 'sub-deploy', namespace });
    expect(deploy.spec?.replicas).toBe(1);
    const podNow = await core.readNamespacedPod({ name: 'sub-pod', namespace });
    expect(podNow.metadata?.resourceVersion).toBe(pod.metadata?.resourceVersion);
    expect(podNow.metadata?.deletionTimestamp).toBeUndefined();
    expect(podNow.spec?.ephemeralContainers).toBeUndefined();
    expect((await core.readNamespace({ name: 'sub-ns' })).status?.phase).toBe('Active');
    for (const name of ['sub-owner', 'sub-dependent'])
      expect((await rawRequest(cluster, cluster.adminToken, 'GET', `${ns}/configmaps/${name}`)).status).toBe(200);
    expect((await rawRequest(cluster, cluster.adminToken, 'GET', `${deployments}/sub-applied`)).status).toBe(404);
  });

  it('dryRun=Bogus on each of them is a 422 that names the field, and nothing is written', async () => {
    const before = await settledVersion();
    for (const [method, path, what, body, headers] of subresourceWrites('Bogus')) {
      const answer = await rawRequest(cluster, cluster.adminToken, method, path, body, headers);
      expect([what, answer.status, answer.body?.message], answer.text).toEqual([
        what,
        422,
        expect.stringMatching(/dryRun: Unsupported value: .*"Bogus".*supported values: "All"/),
      ]);
    }
    expect(await settledVersion()).toBe(before);
  });
});
