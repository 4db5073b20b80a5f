// Writes as kube-apiserver v1.32 answers them, each case read from the upstream file it cites: optimistic concurrency
// (409 on a stale resourceVersion), metadata.generation, JSON patch failures, strategic merge by patchMergeKey,
// delete preconditions and deletecollection; and, with the node running, graceful pod deletion.
import { AppsV1Api, CoreV1Api, KubeConfig, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { expectStatus, rawRequest } from '../../testkit/api-requests.js';
import { pidsOfContainer } from '../../testkit/pods.js';
import { waitFor } from '../../testkit/wait.js';

const ns = 'default';

describe('writes on the API alone', () => {
  let cluster: ClusterHandle;
  let core: CoreV1Api;
  let apps: AppsV1Api;
  const send = (method: string, path: string, body?: unknown, contentType?: string) =>
    rawRequest(
      cluster,
      cluster.adminToken,
      method,
      path,
      body as object | undefined,
      contentType ? { 'content-type': contentType } : {},
    );

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

  it('a write naming a stale resourceVersion is a 409; one naming none is unconditional', async () => {
    // apiserver pkg/registry/generic/registry/store.go Update (OptimisticLockErrorMsg), AllowUnconditionalUpdate
    // Given a config map read, then changed by someone else
    const read = await core.createNamespacedConfigMap({
      namespace: ns,
      body: { metadata: { name: 'occ' }, data: { k: '1' } },
    });
    await core.replaceNamespacedConfigMap({
      name: 'occ',
      namespace: ns,
      body: { metadata: { name: 'occ' }, data: { k: '2' } },
    });
    const stale = read.metadata!.resourceVersion!;

    // When the first reader replaces it, or merge-patches it, naming the version it read
    const put = await send('PUT', `/api/v1/namespaces/${ns}/configmaps/occ`, {
      metadata: { name: 'occ', resourceVersion: stale },
      data: { k: '3' },
    });
    const patch = await send(
      'PATCH',
      `/api/v1/namespaces/${ns}/configmaps/occ`,
      { metadata: { resourceVersion: stale }, data: { k: '3' } },
      'application/merge-patch+json',
    );

    // Then both are conflicts with kube-apiserver's message, and the object keeps the other writer's data
    const message =
      'Operation cannot be fulfilled on configmaps "occ": the object has been modified; please apply your changes to ' +
      'the latest version and try again';
    for (const answer of [put, patch]) {
      expect(answer.status).toBe(409);
      expect(answer.body).toMatchObject({ reason: 'Conflict', message, details: { name: 'occ', kind: 'configmaps' } });
    }
    expect((await core.readNamespacedConfigMap({ name: 'occ', namespace: ns })).data).toEqual({ k: '2' });

    // When it is replaced naming no version
    const blind = await send('PUT', `/api/v1/namespaces/${ns}/configmaps/occ`, {
      metadata: { name: 'occ' },
      data: { k: '4' },
    });
    // Then the write happens
    expect(blind.status).toBe(200);
    expect(blind.body.data).toEqual({ k: '4' });
  });

  it('a Deployment generation moves on spec and annotation changes only, not on labels, status or its controller', async () => {
    // kubernetes pkg/registry/apps/deployment/strategy.go PrepareForCreate/PrepareForUpdate (and the status
    // strategy, through which the deployment controller writes its revision annotation)
    // Given a Deployment the controller has observed
    await apps.createNamespacedDeployment({
      namespace: ns,
      body: {
        metadata: { name: 'gen' },
        spec: {
          replicas: 0,
          selector: { matchLabels: { app: 'gen' } },
          template: { metadata: { labels: { app: 'gen' } }, spec: { containers: [{ name: 'c', image: 'x' }] } },
        },
      },
    });
    const observed = await waitFor('the controller observed generation 1 and wrote revision 1', async () => {
      const d = await apps.readNamespacedDeployment({ name: 'gen', namespace: ns });
      const revision = d.metadata?.annotations?.['deployment.kubernetes.io/revision'];
      return d.status?.observedGeneration === 1 && revision === '1' ? d : undefined;
    });
    // Then the controller's own writes left the generation at 1
    expect(observed.metadata?.generation).toBe(1);

    const merge = async (body: object) =>
      (
        await apps.patchNamespacedDeployment(
          { name: 'gen', namespace: ns, body },
          setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
        )
      ).metadata?.generation;
    // When labels change, then annotations, then the spec
    const afterLabels = await merge({ metadata: { labels: { team: 'a' } } });
    const afterAnnotation = await merge({ metadata: { annotations: { note: 'x' } } });
    const afterSpec = await merge({ spec: { replicas: 1 } });
    // Then only the annotation and the spec changes moved it
    expect([afterLabels, afterAnnotation, afterSpec]).toEqual([1, 2, 3]);

    // And a ConfigMap, whose strategy sets none, has no generation
    const cm = await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'gen-cm' } } });
    expect(cm.metadata?.generation).toBeUndefined();
  });

  it('a JSON patch whose test fails, or that names a missing path, is a 422 and changes nothing', async () => {
    // apiserver pkg/endpoints/handlers/patch.go applyJSPatch → apimachinery NewGenericServerResponse(422), which
    // keeps json-patch's own message out of the Status
    // Given a config map
    const made = await core.createNamespacedConfigMap({
      namespace: ns,
      body: { metadata: { name: 'jp', labels: { v: '1' } }, data: { k: 'a' } },
    });
    const path = `/api/v1/namespaces/${ns}/configmaps/jp`;
    const jsonPatch = (ops: object[]) => send('PATCH', path, ops, 'application/json-patch+json');

    // When a patch tests a value that holds, then replaces it
    const applied = await jsonPatch([
      { op: 'test', path: '/metadata/labels/v', value: '1' },
      { op: 'replace', path: '/data/k', value: 'b' },
    ]);
    // Then it applies
    expect(applied.status).toBe(200);
    expect(applied.body.data).toEqual({ k: 'b' });

    // When a patch's test fails after an operation that would apply, or it removes a path that is not there
    const failedTest = await jsonPatch([
      { op: 'replace', path: '/data/k', value: 'c' },
      { op: 'test', path: '/metadata/labels/v', value: '2' },
    ]);
    const missing = await jsonPatch([{ op: 'remove', path: '/data/nothing' }]);
    // Or it names an operation json-patch does not know (its Apply fails: the same 422, not a 400)
    const unknown = await jsonPatch([{ op: 'increment', path: '/data/k' }]);
    // Then each is the same 422, and the object is as it was
    for (const answer of [failedTest, missing, unknown]) {
      expect(answer.status).toBe(422);
      expect(answer.body).toMatchObject({
        reason: 'Invalid',
        message: 'the server rejected our request due to an error in our request',
      });
    }
    const now = await core.readNamespacedConfigMap({ name: 'jp', namespace: ns });
    expect(now.data).toEqual({ k: 'b' });
    expect(Number(now.metadata?.resourceVersion)).toBe(Number(applied.body.metadata.resourceVersion));
    expect(Number(made.metadata?.resourceVersion)).toBeLessThan(Number(now.metadata?.resourceVersion));

    // And a replace of a key the map lacks sets it: json-patch v4 finds the map and never fails the key's lookup
    // (evanphx/json-patch patch.go replace → partialDoc.get)
    const replaced = await jsonPatch([{ op: 'replace', path: '/data/new', value: 'n' }]);
    expect(replaced.status).toBe(200);
    expect(replaced.body.data).toEqual({ k: 'b', new: 'n' });
  });

  it('a strategic merge patch merges containers by name and their ports by containerPort, and deletes by key', async () => {
    // apimachinery pkg/util/strategicpatch/patch.go, patchMergeKey tags of k8s.io/api core/v1 types.go
    // Given a pod with two containers, one with a port
    await core.createNamespacedPod({
      namespace: ns,
      body: {
        metadata: { name: 'smp' },
        spec: {
          containers: [
            { name: 'app', image: 'x', ports: [{ containerPort: 8080, name: 'http' }] },
            { name: 'side', image: 'y' },
          ],
        },
      },
    });
    // When a patch names container "app" with a second port, and deletes container "side" with $patch: delete
    // (pods allow no such change after create, so it is sent as a dry run: the answer is the merged object)
    const answer = await send(
      'PATCH',
      `/api/v1/namespaces/${ns}/pods/smp?dryRun=All`,
      {
        metadata: { labels: { merged: 'yes' } },
        spec: {
          containers: [
            { name: 'app', ports: [{ containerPort: 9090, name: 'admin' }] },
            { name: 'side', $patch: 'delete' },
          ],
        },
      },
      'application/strategic-merge-patch+json',
    );
    // Then app keeps its image and both ports (the new one appended: mergeSliceWithoutSpecialElements), side is gone
    expect(answer.status).toBe(200);
    const containers = answer.body.spec.containers;
    expect(containers.map((c: { name: string }) => c.name)).toEqual(['app']);
    expect(containers[0].image).toBe('x');
    expect(containers[0].ports.map((p: { containerPort: number }) => p.containerPort)).toEqual([8080, 9090]);
  });

  it('a delete precondition that does not hold is a 409 naming the kind; deletecollection deletes what matches', async () => {
    // apiserver pkg/registry/rest/delete.go BeforeDelete; pkg/registry/generic/registry/store.go DeleteCollection
    // Given three config maps, two labelled for deletion
    for (const [name, labels] of [
      ['dc-1', { dc: 'y' }],
      ['dc-2', { dc: 'y' }],
      ['dc-3', { dc: 'n' }],
    ] as const)
      await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name, labels } } });
    const one = await core.readNamespacedConfigMap({ name: 'dc-1', namespace: ns });

    // When dc-1 is deleted with a resourceVersion precondition it no longer holds
    const refused = await expectStatus(
      core.deleteNamespacedConfigMap({
        name: 'dc-1',
        namespace: ns,
        body: { preconditions: { resourceVersion: '1' } },
      }),
    );
    // Then it is a conflict in BeforeDelete's words
    expect(refused).toMatchObject({
      code: 409,
      reason: 'Conflict',
      message:
        'Operation cannot be fulfilled on ConfigMap "dc-1": the ResourceVersion in the precondition (1) does not ' +
        `match the ResourceVersion in record (${one.metadata?.resourceVersion}). The object might have been modified`,
    });

    // When the labelled ones are deleted as a collection
    const gone = await send('DELETE', `/api/v1/namespaces/${ns}/configmaps?labelSelector=dc%3Dy`);
    // Then the answer lists what was deleted, and only dc-3 is left
    expect(gone.status).toBe(200);
    expect(gone.body.kind).toBe('ConfigMapList');
    expect(gone.body.items.map((o: { metadata: { name: string } }) => o.metadata.name)).toEqual(['dc-1', 'dc-2']);
    const left = await core.listNamespacedConfigMap({ namespace: ns, labelSelector: 'dc' });
    expect(left.items.map((o) => o.metadata?.name)).toEqual(['dc-3']);

    // And a field label the kind does not register is refused there too, deleting nothing
    const badField = await send('DELETE', `/api/v1/namespaces/${ns}/configmaps?fieldSelector=data.k%3Dv`);
    expect(badField.status).toBe(400);
    expect((await core.listNamespacedConfigMap({ namespace: ns, labelSelector: 'dc' })).items).toHaveLength(1);
  });

  it('propagationPolicy: Background deletes the owner at once, Foreground holds it with foregroundDeletion, a Job orphans by default', async () => {
    // apiserver pkg/registry/generic/registry/store.go (deletionFinalizersForGarbageCollection: Foreground and
    // Orphan add the foregroundDeletion / orphan finalizer, Background none), kubernetes
    // pkg/registry/batch/job/strategy.go DefaultGarbageCollectionPolicy (OrphanDependents for batch/v1),
    // pkg/controller/garbagecollector (dependents of a deleted owner go after it)
    const replicaSet = (name: string) =>
      apps.createNamespacedReplicaSet({
        namespace: ns,
        body: {
          metadata: { name },
          spec: {
            replicas: 2,
            selector: { matchLabels: { rs: name } },
            template: { metadata: { labels: { rs: name } }, spec: { containers: [{ name: 'c', image: 'x' }] } },
          },
        },
      });
    const podsOf = async (label: string) =>
      (await core.listNamespacedPod({ namespace: ns, labelSelector: label })).items;
    // Given two replica sets with their pods
    await replicaSet('bg');
    await replicaSet('fg');
    await waitFor('4 pods', async () => (await podsOf('rs in (bg,fg)')).length === 4);

    // When one is deleted in the background (as devop deletes its agent's pods and jobs)
    const background = await send('DELETE', `/apis/apps/v1/namespaces/${ns}/replicasets/bg`, {
      kind: 'DeleteOptions',
      apiVersion: 'v1',
      propagationPolicy: 'Background',
    });
    // Then it is gone at once (a 200 with a Success Status), and its pods follow
    expect(background.status).toBe(200);
    expect(background.body).toMatchObject({ kind: 'Status', status: 'Success' });
    expect((await expectStatus(apps.readNamespacedReplicaSet({ name: 'bg', namespace: ns }))).code).toBe(404);
    await waitFor('bg pods collected', async () => (await podsOf('rs=bg')).length === 0);

    // When the other is deleted in the foreground
    const foreground = await send('DELETE', `/apis/apps/v1/namespaces/${ns}/replicasets/fg`, {
      kind: 'DeleteOptions',
      apiVersion: 'v1',
      propagationPolicy: 'Foreground',
    });
    // Then the answer is the replica set, still there, held by foregroundDeletion, and it goes after its pods
    expect(foreground.status).toBe(200);
    expect(foreground.body.metadata.finalizers).toEqual(['foregroundDeletion']);
    expect(foreground.body.metadata.deletionTimestamp).toBeTruthy();
    await waitFor('fg and its pods gone', async () => {
      const gone = (await expectStatus(apps.readNamespacedReplicaSet({ name: 'fg', namespace: ns }))).code === 404;
      return gone && (await podsOf('rs=fg')).length === 0;
    });

    // When a Job with a pod is deleted with no propagationPolicy
    const batch = `/apis/batch/v1/namespaces/${ns}/jobs`;
    await send('POST', batch, {
      metadata: { name: 'orphaner' },
      spec: { template: { spec: { restartPolicy: 'Never', containers: [{ name: 'c', image: 'x' }] } } },
    });
    await waitFor('the job pod', async () => (await podsOf('job-name=orphaner')).length === 1);
    expect((await send('DELETE', `${batch}/orphaner`)).status).toBe(200);
    // Then the Job goes and its pod stays, without an owner
    await waitFor('job gone', async () => (await send('GET', `${batch}/orphaner`)).status === 404);
    const orphan = await waitFor('pod orphaned', async () => {
      const [p] = await podsOf('job-name=orphaner');
      return p && !p.metadata?.ownerReferences?.length ? p : undefined;
    });
    expect(orphan.metadata?.deletionTimestamp).toBeUndefined();
  });
});

describe('graceful pod deletion, with the node running', () => {
  let cluster: ClusterHandle;
  let core: CoreV1Api;
  const podPath = (name: string, query = '') => `/api/v1/namespaces/${ns}/pods/${name}${query}`;

  beforeAll(async () => {
    cluster = await startCluster();
    const kc = new KubeConfig();
    kc.loadFromFile(cluster.kubeconfigPath);
    core = kc.makeApiClient(CoreV1Api);
  });

  afterAll(async () => {
    await cluster?.stop();
  });

  const ignoringTerm = (name: string) =>
    core.createNamespacedPod({
      namespace: ns,
      body: {
        metadata: { name },
        spec: {
          terminationGracePeriodSeconds: 60,
          containers: [
            { name: 'c', image: 'devop.test/shell', command: ['sh', '-c', 'trap "" TERM; while :; do sleep 1; done'] },
          ],
        },
      },
    });
  const running = (name: string) =>
    waitFor(
      `${name} running`,
      async () => {
        const p = await core.readNamespacedPod({ name, namespace: ns });
        return p.status?.phase === 'Running' ? p : undefined;
      },
      60_000,
    );
  const send = (method: string, path: string) => rawRequest(cluster, cluster.adminToken, method, path);

  it('a delete sets deletionTimestamp and the grace period; a longer one changes nothing, a shorter one ends it sooner', async () => {
    // apiserver pkg/registry/rest/delete.go BeforeDelete (a grace period may only shorten),
    // kubernetes pkg/registry/core/pod/strategy.go CheckGracefulDelete (spec.terminationGracePeriodSeconds by default),
    // apiserver pkg/endpoints/handlers/delete.go (200 with the object while the deletion is pending),
    // kubernetes pkg/kubelet/pod_workers.go (a shorter grace period cancels the kill under way)
    // Given a running pod that ignores SIGTERM, with 60 s to stop
    await ignoringTerm('grace');
    const pod = await running('grace');
    const container = pod.status!.containerStatuses![0].containerID!;

    // When it is deleted with no options
    const before = Date.now();
    const first = await send('DELETE', podPath('grace'));
    // Then the answer is 200 with the pod, now 60 s from gone, and the pod is still there
    expect(first.status).toBe(200);
    expect(first.body.metadata.deletionGracePeriodSeconds).toBe(60);
    const due = Date.parse(first.body.metadata.deletionTimestamp);
    expect(due).toBeGreaterThanOrEqual(Math.floor(before / 1000) * 1000 + 59_000);
    expect(due).toBeLessThanOrEqual(Date.now() + 61_000);
    expect((await core.readNamespacedPod({ name: 'grace', namespace: ns })).metadata?.deletionTimestamp).toBeTruthy();

    // When it is deleted again with a longer grace period
    const longer = await send('DELETE', podPath('grace', '?gracePeriodSeconds=120'));
    // Then nothing moves
    expect(longer.status).toBe(200);
    expect(longer.body.metadata.deletionGracePeriodSeconds).toBe(60);
    expect(longer.body.metadata.deletionTimestamp).toBe(first.body.metadata.deletionTimestamp);

    // When it is deleted with a grace period of 2 s
    const shorter = await send('DELETE', podPath('grace', '?gracePeriodSeconds=2'));
    // Then the deletion is due sooner, and the kubelet kills the container and removes the pod well before 60 s
    expect(shorter.body.metadata.deletionGracePeriodSeconds).toBe(2);
    expect(Date.parse(shorter.body.metadata.deletionTimestamp)).toBeLessThan(due);
    await waitFor(
      'pod gone',
      async () => (await expectStatus(core.readNamespacedPod({ name: 'grace', namespace: ns }))).code === 404,
      30_000,
    );
    expect(await pidsOfContainer(container)).toEqual([]);
  }, 120_000);

  it('gracePeriodSeconds=0 removes the pod object at once, and the kubelet kills its container', async () => {
    // Given a running pod that ignores SIGTERM, deleted gracefully first (its kill under way, 60 s to go)
    await ignoringTerm('force');
    const pod = await running('force');
    const container = pod.status!.containerStatuses![0].containerID!;
    await send('DELETE', podPath('force'));
    // When it is deleted with gracePeriodSeconds=0
    const now = await send('DELETE', podPath('force', '?gracePeriodSeconds=0'));
    // Then the object is gone at once, and its container soon after
    expect(now.status).toBe(200);
    expect((await expectStatus(core.readNamespacedPod({ name: 'force', namespace: ns }))).code).toBe(404);
    await waitFor('container gone', async () => (await pidsOfContainer(container)).length === 0, 30_000);
  }, 120_000);
});
