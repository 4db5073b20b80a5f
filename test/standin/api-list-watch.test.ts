// Lists and watches as kube-apiserver v1.32 serves them, each case read from the upstream file it cites: which
// resourceVersion a list is served at, the ListOptions it refuses, field selectors per kind, bookmarks, and what a
// watch sends when an object stops matching its selector. Plain HTTPS and client-node's Watch against the stand-in.
import { CoreV1Api, KubeConfig, Watch } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { rawRequest } from '../../testkit/api-requests.js';
import { waitFor } from '../../testkit/wait.js';

let cluster: ClusterHandle;
let kc: KubeConfig;
let core: CoreV1Api;
const ns = 'default';
const configMaps = `/api/v1/namespaces/${ns}/configmaps`;

beforeAll(async () => {
  cluster = await startCluster({ kubelet: false });
  kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfigPath);
  core = kc.makeApiClient(CoreV1Api);
});

afterAll(async () => {
  await cluster?.stop();
});

const get = (path: string) => rawRequest(cluster, cluster.adminToken, 'GET', path);
const names = (list: { items: { metadata: { name: string } }[] }, prefix: string) =>
  list.items.map((o) => o.metadata.name).filter((n) => n.startsWith(prefix));

describe('list resourceVersion semantics (apiserver pkg/storage/cacher/delegator.go, etcd3/store.go GetList)', () => {
  it('resourceVersion "" and "0" list what is stored now; resourceVersionMatch=Exact lists the objects as they were', async () => {
    // Given a config map created, then changed, and a second one created after that
    const first = await core.createNamespacedConfigMap({
      namespace: ns,
      body: { metadata: { name: 'rv-a', labels: { rv: 't' } }, data: { k: 'one' } },
    });
    const atCreate = first.metadata!.resourceVersion!;
    await core.replaceNamespacedConfigMap({
      name: 'rv-a',
      namespace: ns,
      body: { metadata: { name: 'rv-a', labels: { rv: 't' } }, data: { k: 'two' } },
    });
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'rv-b', labels: { rv: 't' } } } });

    // When it is listed with no version, with "0", and at the version of the first create exactly
    const latest = await get(`${configMaps}?labelSelector=rv%3Dt`);
    const any = await get(`${configMaps}?labelSelector=rv%3Dt&resourceVersion=0`);
    const exact = await get(
      `${configMaps}?labelSelector=rv%3Dt&resourceVersion=${atCreate}&resourceVersionMatch=Exact`,
    );

    // Then the first two answer today's objects, the exact one the objects as they were then, at that version
    for (const now of [latest, any]) {
      expect(now.status).toBe(200);
      expect(names(now.body, 'rv-')).toEqual(['rv-a', 'rv-b']);
      expect(now.body.items[0].data).toEqual({ k: 'two' });
    }
    expect(exact.status).toBe(200);
    expect(names(exact.body, 'rv-')).toEqual(['rv-a']);
    expect(exact.body.items[0].data).toEqual({ k: 'one' });
    expect(exact.body.metadata.resourceVersion).toBe(atCreate);
  });

  it('an exact version out of the history window is 410 Expired; a minimum version not reached yet is waited for', async () => {
    // Given a version the history no longer holds
    const old = (await core.listNamespacedConfigMap({ namespace: ns })).metadata!.resourceVersion!;
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'rv-compacted' } } });
    cluster.compactWatchHistory();

    // When a list asks for it exactly
    const expired = await get(`${configMaps}?resourceVersion=${old}&resourceVersionMatch=Exact`);

    // Then it is 410 Expired with etcd3's message (apiserver pkg/storage/etcd3/errors.go)
    expect(expired.status).toBe(410);
    expect(expired.body).toMatchObject({
      reason: 'Expired',
      message: 'The resourceVersion for the provided list is too old.',
    });

    // When a list asks for a version one past the current one, and a write reaches it meanwhile
    const current = Number((await core.listNamespacedConfigMap({ namespace: ns })).metadata!.resourceVersion);
    const waiting = get(`${configMaps}?resourceVersion=${current + 1}&resourceVersionMatch=NotOlderThan`);
    await new Promise((r) => setTimeout(r, 300));
    await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'rv-late' } } });

    // Then the list answers once the store has it, with the late object
    const reached = await waiting;
    expect(reached.status).toBe(200);
    expect(names(reached.body, 'rv-late')).toEqual(['rv-late']);

    // When a version far ahead is asked for, as a minimum (the cacher waits 3 s) and exactly
    const far = current + 1000;
    const tooLarge = await get(`${configMaps}?resourceVersion=${far}`);
    const tooLargeExact = await get(`${configMaps}?resourceVersion=${far}&resourceVersionMatch=Exact`);

    // Then both are 504 Timeout with the ResourceVersionTooLarge cause (apiserver pkg/storage/errors.go)
    for (const answer of [tooLarge, tooLargeExact]) {
      expect(answer.status).toBe(504);
      expect(answer.body.reason).toBe('Timeout');
      expect(answer.body.message).toMatch(new RegExp(`^Timeout: Too large resource version: ${far}, current: \\d+$`));
      expect(answer.body.details.causes).toEqual([
        { reason: 'ResourceVersionTooLarge', message: 'Too large resource version' },
      ]);
    }
  });

  it('refuses the ListOptions ValidateListOptions refuses, with a 422 on ListOptions.meta.k8s.io', async () => {
    // apimachinery pkg/apis/meta/internalversion/validation/validation.go, WatchList on as in v1.32
    // (apiserver pkg/features/kube_features.go), answered by apiserver pkg/endpoints/handlers/get.go
    const cases: [string, string, string][] = [
      [
        'resourceVersionMatch=Exact',
        'resourceVersionMatch',
        'resourceVersionMatch is forbidden unless resourceVersion is provided',
      ],
      [
        'resourceVersion=0&resourceVersionMatch=Exact',
        'resourceVersionMatch',
        'resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
      ],
      [
        'resourceVersion=1&resourceVersionMatch=Newest',
        'resourceVersionMatch',
        'Unsupported value: "Newest": supported values: "Exact", "NotOlderThan", ""',
      ],
      ['sendInitialEvents=true', 'sendInitialEvents', 'sendInitialEvents is forbidden for list'],
      [
        'watch=1&resourceVersionMatch=NotOlderThan',
        'resourceVersionMatch',
        'resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided',
      ],
      [
        'watch=1&sendInitialEvents=true',
        'resourceVersionMatch',
        'sendInitialEvents requires setting resourceVersionMatch to NotOlderThan',
      ],
    ];
    for (const [query, field, why] of cases) {
      // When a list or watch carries these options
      const answer = await get(`${configMaps}?${query}`);
      // Then it is refused before anything is listed
      expect(answer.status, query).toBe(422);
      expect(answer.body.reason).toBe('Invalid');
      expect(answer.body.message).toContain(`ListOptions.meta.k8s.io "" is invalid: ${field}: `);
      expect(answer.body.message).toContain(why);
    }
  });
});

describe('field selectors (kubernetes pkg/apis/core/v1/conversion.go, pkg/apis/batch/v1/conversion.go)', () => {
  it('selects on the fields each kind registers and refuses any other with a 400 naming it', async () => {
    // Given two pods (the one-node scheduler binds both), one with restartPolicy Never, and a TLS secret
    await core.createNamespacedPod({
      namespace: ns,
      body: { metadata: { name: 'fs-a' }, spec: { restartPolicy: 'Never', containers: [{ name: 'c', image: 'x' }] } },
    });
    await core.createNamespacedPod({
      namespace: ns,
      body: { metadata: { name: 'fs-b' }, spec: { containers: [{ name: 'c', image: 'x' }] } },
    });
    await core.createNamespacedSecret({
      namespace: ns,
      body: { metadata: { name: 'fs-tls' }, type: 'kubernetes.io/tls', data: { 'tls.crt': '', 'tls.key': '' } },
    });
    const pods = (selector: string) =>
      get(`/api/v1/namespaces/${ns}/pods?fieldSelector=${encodeURIComponent(selector)}`);
    await waitFor(
      'both pods bound',
      async () => names((await pods(`spec.nodeName=${cluster.nodeName}`)).body, 'fs-').length === 2,
    );

    // When pods are selected by the fields a Pod registers (spec.host is the old name of spec.nodeName)
    const never = await pods('spec.restartPolicy=Never');
    const byOldName = await pods(`spec.host=${cluster.nodeName}`);
    const pending = await pods('status.phase=Pending,metadata.name!=fs-a,spec.hostNetwork=false');
    // Then they match as kube-apiserver matches them (an unset hostNetwork reads "false": pod/strategy.go)
    expect(names(never.body, 'fs-')).toEqual(['fs-a']);
    expect(names(byOldName.body, 'fs-')).toEqual(['fs-a', 'fs-b']);
    expect(names(pending.body, 'fs-')).toEqual(['fs-b']);
    const tls = await get(`/api/v1/namespaces/${ns}/secrets?fieldSelector=type%3Dkubernetes.io%2Ftls`);
    expect(names(tls.body, 'fs-')).toEqual(['fs-tls']);
    const jobs = await get(`/apis/batch/v1/namespaces/${ns}/jobs?fieldSelector=status.successful%3D0`);
    expect(jobs.status).toBe(200);

    // When a field no conversion registers is selected on
    const refused = [
      [await pods('spec.containers=x'), 'field label not supported: spec.containers'],
      [
        await get(`${configMaps}?fieldSelector=data.k%3Dv`),
        '"data.k" is not a known field selector: only "metadata.name", "metadata.namespace"',
      ],
      [
        await get(`/apis/batch/v1/namespaces/${ns}/jobs?fieldSelector=status.active%3D1`),
        'field label "status.active" not supported for batchv1.Job',
      ],
      [
        await get(`/api/v1/namespaces/${ns}/pods?watch=1&fieldSelector=spec.nodeSelector%3Dx`),
        'field label not supported: spec.nodeSelector',
      ],
    ] as const;
    // Then each is a 400 BadRequest with the conversion's message (apiserver pkg/endpoints/handlers/get.go listOpts)
    for (const [answer, message] of refused) {
      expect(answer.status, message).toBe(400);
      expect(answer.body).toMatchObject({ reason: 'BadRequest', message });
    }
  });
});

describe('watch (apiserver pkg/storage/cacher/cache_watcher.go, pkg/endpoints/handlers/watch.go)', () => {
  it('sends DELETED with the previous content when an object stops matching, at the event resourceVersion', async () => {
    // Given a watch on config maps labelled w=sel (devop watches its pod by metadata.name the same way)
    const list = await core.listNamespacedConfigMap({ namespace: ns });
    const events: { type: string; obj: any }[] = [];
    const req = await new Watch(kc).watch(
      configMaps,
      { resourceVersion: list.metadata?.resourceVersion, labelSelector: 'w=sel' },
      (type, obj) => events.push({ type, obj }),
      () => undefined,
    );
    // When a matching object is created, then relabelled out of the selector
    await core.createNamespacedConfigMap({
      namespace: ns,
      body: { metadata: { name: 'leaves', labels: { w: 'sel' } }, data: { k: 'before' } },
    });
    const moved = await core.replaceNamespacedConfigMap({
      name: 'leaves',
      namespace: ns,
      body: { metadata: { name: 'leaves', labels: { w: 'other' } }, data: { k: 'after' } },
    });
    await waitFor('ADDED and DELETED', () => events.length >= 2);
    req.abort();

    // Then the DELETED carries the object as it last matched, stamped with the relabelling's resourceVersion
    expect(events.map((e) => e.type)).toEqual(['ADDED', 'DELETED']);
    expect(events[1].obj.metadata.labels).toEqual({ w: 'sel' });
    expect(events[1].obj.data).toEqual({ k: 'before' });
    expect(events[1].obj.metadata.resourceVersion).toBe(moved.metadata?.resourceVersion);
  });

  it('a watch that allows bookmarks gets one 2 s before its timeout, at the latest version it sent', async () => {
    // apiserver pkg/storage/cacher/cache_watcher.go nextBookmarkTime: "right before the watcher timeout"
    // Given a watch of 3 s that allows bookmarks
    const list = await core.listNamespacedConfigMap({ namespace: ns });
    const events: { type: string; obj: any; at: number }[] = [];
    let endedAt = 0;
    const ended = new Promise<void>((resolve) => {
      void new Watch(kc).watch(
        configMaps,
        { resourceVersion: list.metadata?.resourceVersion, allowWatchBookmarks: true, timeoutSeconds: 3 },
        (type, obj) => events.push({ type, obj, at: Date.now() }),
        () => {
          endedAt = Date.now();
          resolve();
        },
      );
    });
    // When a config map is created while it runs, and the watch runs out
    const made = await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'bm-1' } } });
    await ended;
    // Then the ADDED came, then a BOOKMARK at its version or later, a while before the end
    expect(events.map((e) => e.type)).toEqual(['ADDED', 'BOOKMARK']);
    const bookmark = events[1];
    expect(Number(bookmark.obj.metadata.resourceVersion)).toBeGreaterThanOrEqual(
      Number(made.metadata?.resourceVersion),
    );
    expect(endedAt - bookmark.at).toBeGreaterThan(1000);
  });

  it('a watch list sends the current objects, then a BOOKMARK marking the end of the initial events', async () => {
    // Given two config maps
    for (const name of ['wl-1', 'wl-2'])
      await core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name, labels: { wl: 'y' } } } });
    const events: { type: string; obj: any }[] = [];
    // When a watch asks for its initial events, as client-go's reflector does with WatchListClient
    const req = await new Watch(kc).watch(
      configMaps,
      {
        sendInitialEvents: true,
        resourceVersionMatch: 'NotOlderThan',
        allowWatchBookmarks: true,
        labelSelector: 'wl=y',
      },
      (type, obj) => events.push({ type, obj }),
      () => undefined,
    );
    await waitFor('two ADDED and a BOOKMARK', () => events.length >= 3);
    req.abort();

    // Then the objects come as ADDED, then a BOOKMARK with only kind, apiVersion and metadata, annotated as the end
    expect(events.map((e) => `${e.type} ${e.obj.metadata.name ?? ''}`)).toEqual([
      'ADDED wl-1',
      'ADDED wl-2',
      'BOOKMARK ',
    ]);
    const bookmark = events[2].obj;
    expect(Object.keys(bookmark).sort()).toEqual(['apiVersion', 'kind', 'metadata']);
    expect(bookmark.metadata.annotations).toEqual({ 'k8s.io/initial-events-end': 'true' });
    expect(Number(bookmark.metadata.resourceVersion)).toBeGreaterThanOrEqual(
      Number(events[1].obj.metadata.resourceVersion),
    );
  });
});
