// The official Python client (Debian's python3-kubernetes, for /usr/bin/python3), nobody here wrote it, against the
// stand-in API server: a watch from a resourceVersion that is gone and the relist after it, DELETE with a
// V1DeleteOptions body, server-side apply with two field managers and against the Update manager a create records, and
// kubernetes.leaderelection over a Lease.
import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { CoordinationV1Api, CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { waitFor } from '../../testkit/wait.js';

const run = promisify(execFile);
const PYTHON = '/usr/bin/python3';
const FIXTURES = join(import.meta.dirname, 'fixtures');
const namespace = 'default';

let cluster: ClusterHandle;
let core: CoreV1Api;
let coordination: CoordinationV1Api;

beforeAll(async () => {
  if (!existsSync(PYTHON))
    throw new Error(`${PYTHON} is missing: run scripts/setup.sh (it installs python3-kubernetes)`);
  const probe = await run(PYTHON, ['-c', 'import kubernetes']).then(
    () => true,
    () => false,
  );
  if (!probe) throw new Error('python3-kubernetes is not installed for /usr/bin/python3: run scripts/setup.sh');
  cluster = await startCluster({ kubelet: false });
  const kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfigPath);
  core = kc.makeApiClient(CoreV1Api);
  coordination = kc.makeApiClient(CoordinationV1Api);
});

afterAll(async () => {
  await cluster?.stop();
});

/** Runs one scenario of fixtures/python-client.py and returns the JSON line it prints. */
async function python(scenario: string, ...args: string[]): Promise<Record<string, unknown>> {
  const r = await run(PYTHON, [join(FIXTURES, 'python-client.py'), scenario, cluster.kubeconfigPath, ...args], {
    timeout: 60_000,
  });
  return JSON.parse(r.stdout.trim().split('\n').at(-1) ?? '{}');
}

describe('python3-kubernetes against the stand-in', () => {
  it('a watch from a compacted resourceVersion ends in 410 Gone, and the relist resumes the watch', async () => {
    // Given a version the client listed, then changes, then the history compacted (as etcd compaction does)
    // (kube-apiserver: k8s.io/apiserver pkg/storage/cacher/watch_cache.go answers a too old version with
    // errors.NewResourceExpired, sent as an ERROR event by pkg/endpoints/handlers/watch.go)
    const stale = (await core.listNamespacedConfigMap({ namespace })).metadata?.resourceVersion ?? '';
    await core.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'py-before-compaction' } } });
    cluster.compactWatchHistory();
    // When the client watches from the old version, then relists and watches from the list's version
    const seen = await python('relist', namespace, stale, 'py-after-relist');
    // Then the watch is refused with 410, the relist holds the change, and the next change arrives as ADDED
    expect(seen.gone).toBe(410);
    expect(seen.listed).toContain('py-before-compaction');
    expect(seen.event).toEqual(['ADDED', 'py-after-relist']);
  });

  it('delete with a V1DeleteOptions body honours its preconditions (409 when stale) and deletes', async () => {
    // Given a ConfigMap
    await core.createNamespacedConfigMap({ namespace, body: { metadata: { name: 'py-delete' }, data: { a: '1' } } });
    // When the client deletes it with a stale resourceVersion precondition, then with the current uid and version
    const seen = await python('delete', namespace, 'py-delete');
    // Then the stale one is a 409 Conflict (k8s.io/apiserver pkg/registry/generic/registry/store.go Delete checks
    // the body's preconditions) and the second one deleted it
    expect(seen).toEqual({ stale: 409, after: 404 });
  });

  it('server-side apply: another manager changing an owned field gets 409; force=true takes it over', async () => {
    // When manager alpha applies data.owner, beta applies another value, then beta applies again with force
    const seen = await python('apply', namespace, 'py-apply');
    // Then (k8s.io/apiserver pkg/endpoints/handlers/fieldmanager, sigs.k8s.io/structured-merge-diff merge/update.go)
    // the first apply creates, the clash is a 409 Conflict naming alpha and the field, the forced one wins and the
    // field now belongs to beta
    // (an apply without fieldManager, and force on a merge patch, are 422: apimachinery pkg/apis/meta/v1/validation
    // ValidatePatchOptions)
    expect(seen.noManager).toBe(422);
    expect(seen.forceOnMerge).toBe(422);
    expect(seen.first).toBe(200);
    expect(seen.clash).toBe(409);
    expect(seen.clashReason).toBe('Conflict');
    expect(seen.clashMessage).toBe('Apply failed with 1 conflict: conflict with "alpha": .data.owner');
    expect(seen.forced).toBe(200);
    expect(seen.value).toBe('b');
    // and alpha, left owning nothing, drops out of managedFields (merge/update.go deletes empty managers)
    expect(seen.managers).toEqual([['beta', 'Apply', ['f:owner']]]);
  });

  it('a create with no fieldManager records the first word of the user-agent as its Update manager; apply conflicts', async () => {
    // When the client creates a ConfigMap without fieldManager, then manager alpha applies another value of its field
    const seen = await python('update-manager', namespace, 'py-update-manager');
    // Then the create recorded a manager named after the user-agent up to its first "/" (k8s.io/apiserver
    // pkg/endpoints/handlers/create.go managerOrUserAgent, prefixFromUserAgent) with operation Update, and the apply
    // conflicts with it (sigs.k8s.io/structured-merge-diff merge/update.go; apimachinery
    // pkg/util/managedfields/internal/conflict.go words an Update manager with its apiVersion and time)
    expect(String(seen.userAgent)).toMatch(/^OpenAPI-Generator\//);
    expect(seen.managers).toEqual([['OpenAPI-Generator', 'Update']]);
    expect(seen.clash).toBe(409);
    expect(seen.clashMessage).toMatch(
      /^Apply failed with 1 conflict: conflict with "OpenAPI-Generator" using v1 at [0-9T:-]+Z: \.data\.owner$/,
    );
  });

  it('leader election over a Lease: one candidate leads; when it stops renewing the other takes over', async () => {
    // Given two candidates for one Lease, the first of which stops renewing 3 s after it starts leading
    const out = { a: '', b: '' };
    const start = (id: 'a' | 'b', stopAfter: string) => {
      const child = spawn(PYTHON, [
        join(FIXTURES, 'python-leader.py'),
        cluster.kubeconfigPath,
        namespace,
        'py-leader',
        id,
        stopAfter,
      ]);
      child.stdout.on('data', (d: Buffer) => {
        out[id] += d.toString();
      });
      return child;
    };
    const a = start('a', '3');
    await waitFor('candidate a leading', () => out.a.includes('leading a'), 20_000);
    const b = start('b', '0');
    try {
      // When a leads: b follows for as long as a renews
      await new Promise((r) => setTimeout(r, 1500));
      expect(out.b).not.toContain('leading b');
      const held = await coordination.readNamespacedLease({ name: 'py-leader', namespace });
      expect(held.spec?.holderIdentity).toBe('a');
      // Then once a stops renewing, b takes the Lease over after its lease duration
      await waitFor('candidate a stopping', () => out.a.includes('stopping a'), 10_000);
      await waitFor('candidate b taking over', () => out.b.includes('leading b'), 20_000);
      const taken = await coordination.readNamespacedLease({ name: 'py-leader', namespace });
      expect(taken.spec?.holderIdentity).toBe('b');
    } finally {
      a.kill();
      b.kill();
    }
  }, 60_000);
});
