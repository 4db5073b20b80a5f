// client-node's informer (makeInformer), nobody here wrote it, against the stand-in: resuming from a resourceVersion
// that compaction made too old gets 410 Gone as an ERROR event (k8s.io/apiserver pkg/storage/cacher/watch_cache.go
// errors.NewResourceExpired, sent in the stream by pkg/endpoints/handlers/watch.go), and the informer relists:
// what was deleted meanwhile comes as a delete, what was created as an add, and the watch goes on from the relist.
import { CoreV1Api, KubeConfig, makeInformer, type V1ConfigMap } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { waitFor } from '../../testkit/wait.js';

const namespace = 'default';
let cluster: ClusterHandle;
let kc: KubeConfig;
let core: CoreV1Api;

beforeAll(async () => {
  cluster = await startCluster({ kubelet: false });
  kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfigPath);
  core = kc.makeApiClient(CoreV1Api);
});

afterAll(async () => {
  await cluster?.stop();
});

describe('client-node informer against the stand-in', () => {
  it('relists after 410 Gone: deletes and adds that happened meanwhile arrive, then the watch resumes', async () => {
    // Given an informer that has seen one ConfigMap
    let lists = 0;
    const informer = makeInformer<V1ConfigMap>(kc, `/api/v1/namespaces/${namespace}/configmaps`, () => {
      lists += 1;
      return core.listNamespacedConfigMap({ namespace });
    });
    const events: string[] = [];
    const errors: unknown[] = [];
    informer.on('add', (o) => events.push(`add ${o.metadata?.name}`));
    informer.on('delete', (o) => events.push(`delete ${o.metadata?.name}`));
    // stop() aborts the informer's own request, which it reports as an AbortError: only other errors count
    informer.on('error', (e) => {
      if ((e as Error).name !== 'AbortError') errors.push(e);
    });
    await informer.start();
    await core.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'inf-a' } } });
    await waitFor('the informer adding inf-a', () => events.includes('add inf-a'));
    try {
      // When it stops, a is deleted and b created, the history is compacted, and it starts again from its old version
      await informer.stop();
      await core.deleteNamespacedConfigMap({ name: 'inf-a', namespace });
      await core.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'inf-b' } } });
      cluster.compactWatchHistory();
      await informer.start();
      // Then the 410 made it list again: a's delete and b's add arrive, its cache holds b and not a
      await waitFor('the relist', () => events.includes('delete inf-a') && events.includes('add inf-b'));
      expect(lists).toBe(2);
      expect(informer.list(namespace).map((o) => o.metadata?.name)).toContain('inf-b');
      expect(informer.list(namespace).map((o) => o.metadata?.name)).not.toContain('inf-a');
      // and the watch goes on from the relist's version
      await core.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'inf-c' } } });
      await waitFor('the watch after the relist', () => events.includes('add inf-c'));
      expect(errors).toEqual([]);
    } finally {
      await informer.stop();
    }
  });
});
