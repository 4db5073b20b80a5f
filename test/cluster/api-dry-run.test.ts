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
import { startCluster, type ClusterHandle } from './index.js';
import { expectStatus } from './apiserver/testing.js';

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
