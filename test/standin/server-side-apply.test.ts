// kubectl apply --server-side (1.27 and 1.33, unmodified) against the stand-in API server: field ownership per list
// key (two appliers own different containers and env entries of one Deployment), conflicts worded as kube-apiserver
// words them, pruning what an applier stops applying, the Update managers that create and other writes record, set
// lists, custom resources' list types, and the move from client-side apply.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { waitFor } from '../../testkit/wait.js';

const run = promisify(execFile);
const kubectlPath = (v: string) => `/usr/lib/google-cloud-sdk/bin/kubectl.${v}`;
let cluster: ClusterHandle;
let dir: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'devop-ssa-'));
  cluster = await startCluster({ kubelet: false });
});

afterAll(async () => {
  await cluster?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function kubectl(v: string, args: string[], input?: string): Promise<{ code: number; out: string }> {
  let file: string | undefined;
  if (input !== undefined) {
    file = join(dir, `in-${Math.random().toString(36).slice(2)}.yaml`);
    writeFileSync(file, input);
  }
  const argv = file ? [...args, '-f', file] : args;
  try {
    const r = await run(kubectlPath(v), argv, {
      env: { ...process.env, KUBECONFIG: cluster.kubeconfigPath, HOME: dir },
      timeout: 60_000,
    });
    return { code: 0, out: r.stdout + r.stderr };
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof err.code === 'number' ? err.code : -1, out: `${err.stdout ?? ''}${err.stderr ?? ''}` };
  }
}

interface ManagedFieldsEntry {
  manager: string;
  operation: string;
  fieldsV1: Record<string, Record<string, Record<string, unknown>>>;
}

async function getJson(v: string, what: string[]): Promise<Record<string, any>> {
  const r = await kubectl(v, ['get', ...what, '-o', 'json', '--show-managed-fields']);
  expect(r.code, r.out).toBe(0);
  return JSON.parse(r.out);
}

/** The container list keys each manager owns under spec.template.spec.containers. */
function containerKeys(o: Record<string, any>): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const m of o.metadata.managedFields as ManagedFieldsEntry[]) {
    const containers = (m.fieldsV1 as any)['f:spec']?.['f:template']?.['f:spec']?.['f:containers'] ?? {};
    out[m.manager] = Object.keys(containers).filter((k) => k !== '.');
  }
  return out;
}

const deployment = (ns: string, containers: string) => `apiVersion: apps/v1
kind: Deployment
metadata:
  name: shop
  namespace: ${ns}
spec:
  selector:
    matchLabels: {app: shop}
  template:
    metadata:
      labels: {app: shop}
    spec:
      containers:
${containers}`;

describe.each(['1.27', '1.33'])('kubectl %s apply --server-side', (v) => {
  const ns = `ssa-${v.replace('.', '-')}`;

  beforeAll(async () => {
    const r = await kubectl(v, ['create', 'namespace', ns]);
    expect(r.code, r.out).toBe(0);
  });

  it('owns associative list items per key: two appliers keep their own containers and env entries', async () => {
    // Given team-a applies the Deployment with container app (env A and B)
    const app = `      - name: app
        image: shop:1
        env:
        - {name: A, value: "1"}
        - {name: B, value: "2"}`;
    const a = await kubectl(v, ['apply', '--server-side', '--field-manager=team-a'], deployment(ns, app));
    expect(a.code, a.out).toBe(0);
    // When team-b applies only a sidecar container to the same Deployment
    const sidecar = `      - name: sidecar
        image: proxy:1`;
    const b = await kubectl(v, ['apply', '--server-side', '--field-manager=team-b'], deployment(ns, sidecar));
    // Then there is no conflict: containers are a map list keyed by name (x-kubernetes-list-map-keys in the
    // published schema; sigs.k8s.io/structured-merge-diff typed/merge.go merges such lists item by item), both
    // containers are there, and each manager owns its own item as k:{"name":…} (fieldpath/serialize-pe.go)
    expect(b.code, b.out).toBe(0);
    const o = await getJson(v, ['deployment', 'shop', '-n', ns]);
    expect(o.spec.template.spec.containers.map((c: { name: string }) => c.name)).toEqual(['app', 'sidecar']);
    const keys = containerKeys(o);
    expect(keys['team-a']).toEqual(['k:{"name":"app"}']);
    expect(keys['team-b']).toEqual(['k:{"name":"sidecar"}']);
    const appFields = (o.metadata.managedFields as ManagedFieldsEntry[]).find((m) => m.manager === 'team-a')
      ?.fieldsV1 as any;
    expect(
      Object.keys(appFields['f:spec']['f:template']['f:spec']['f:containers']['k:{"name":"app"}']['f:env']),
    ).toEqual(expect.arrayContaining(['k:{"name":"A"}', 'k:{"name":"B"}']));
  });

  it("changing an item another applier owns is the 409 kube-apiserver words; the applier's own item is fine", async () => {
    // When team-b also applies container app with another image
    const both = `      - name: sidecar
        image: proxy:2
      - name: app
        image: shop:2`;
    const r = await kubectl(v, ['apply', '--server-side', '--field-manager=team-b'], deployment(ns, both));
    // Then it is refused naming team-a and the keyed path (merge/update.go update(): a manager's fields that the
    // apply modifies are conflicts; k8s.io/apimachinery pkg/util/managedfields/internal/conflict.go words them,
    // fieldpath/element.go prints [name="app"]), and nothing changed
    expect(r.code).not.toBe(0);
    expect(r.out).toContain(
      'Apply failed with 1 conflict: conflict with "team-a": .spec.template.spec.containers[name="app"].image',
    );
    const o = await getJson(v, ['deployment', 'shop', '-n', ns]);
    expect(o.spec.template.spec.containers.map((c: { image: string }) => c.image)).toEqual(['shop:1', 'proxy:1']);
  });

  it('an applier that stops applying an env entry removes it; an entry someone else also owns stays', async () => {
    // Given team-b also applies env A of container app with the same value (shared ownership, no conflict)
    const shared = `      - name: sidecar
        image: proxy:1
      - name: app
        env:
        - {name: A, value: "1"}`;
    const b = await kubectl(v, ['apply', '--server-side', '--field-manager=team-b'], deployment(ns, shared));
    expect(b.code, b.out).toBe(0);
    // When team-a applies container app with no env at all
    const bare = `      - name: app
        image: shop:1`;
    const a = await kubectl(v, ['apply', '--server-side', '--field-manager=team-a'], deployment(ns, bare));
    expect(a.code, a.out).toBe(0);
    // Then B, which only team-a applied, is pruned; A stays, team-b still applies it (merge/update.go prune(),
    // addBackOwnedItems)
    const o = await getJson(v, ['deployment', 'shop', '-n', ns]);
    const appContainer = o.spec.template.spec.containers.find((c: { name: string }) => c.name === 'app');
    expect(appContainer.env).toEqual([{ name: 'A', value: '1' }]);
  });
});

describe('Update managers (kubectl 1.33)', () => {
  const v = '1.33';
  const ns = 'default';

  it('create records its manager with operation Update, and an apply that changes its field conflicts', async () => {
    // Given a ConfigMap made by kubectl create (which sends fieldManager=kubectl-create)
    const c = await kubectl(v, ['create', 'configmap', 'levels', '-n', ns, '--from-literal=level=info']);
    expect(c.code, c.out).toBe(0);
    const created = await getJson(v, ['configmap', 'levels', '-n', ns]);
    // Then the create is recorded as an Update manager (k8s.io/apimachinery pkg/util/managedfields: every write
    // other than apply records its manager with operation Update; merge/update.go Update())
    expect(
      (created.metadata.managedFields as ManagedFieldsEntry[]).map((m) => [
        m.manager,
        m.operation,
        Object.keys(m.fieldsV1['f:data'] ?? {}),
      ]),
    ).toEqual([['kubectl-create', 'Update', ['.', 'f:level']]]);
    // When another manager applies a different level
    const cm = `apiVersion: v1
kind: ConfigMap
metadata: {name: levels, namespace: ${ns}}
data: {level: debug}
`;
    const clash = await kubectl(v, ['apply', '--server-side', '--field-manager=ops'], cm);
    // Then it conflicts with the Update manager, worded with its apiVersion and time (conflict.go printManager)
    expect(clash.code).not.toBe(0);
    expect(clash.out).toMatch(
      /Apply failed with 1 conflict: conflict with "kubectl-create" using v1 at [0-9T:-]+Z: \.data\.level/,
    );
    // And with --force-conflicts the field changes hands; kubectl-create keeps only the data map it made
    const forced = await kubectl(v, ['apply', '--server-side', '--field-manager=ops', '--force-conflicts'], cm);
    expect(forced.code, forced.out).toBe(0);
    const after = await getJson(v, ['configmap', 'levels', '-n', ns]);
    expect(after.data).toEqual({ level: 'debug' });
    expect(
      (after.metadata.managedFields as ManagedFieldsEntry[]).map((m) => [
        m.manager,
        m.operation,
        Object.keys(m.fieldsV1['f:data'] ?? {}),
      ]),
    ).toEqual([
      ['kubectl-create', 'Update', []],
      ['ops', 'Apply', ['f:level']],
    ]);
  });

  it('the first apply to an object nobody tracked hands its fields to before-first-apply', async () => {
    // Given namespace kube-public, made by the stand-in itself with no managedFields
    const before = await getJson(v, ['namespace', 'kube-public']);
    expect(before.metadata.managedFields).toBeUndefined();
    // When ops applies a label to it, then applies another value of the label the stand-in set
    const label = (value: string) => `apiVersion: v1
kind: Namespace
metadata:
  name: kube-public
  labels: {team: ops, kubernetes.io/metadata.name: ${value}}
`;
    const first = await kubectl(v, ['apply', '--server-side', '--field-manager=ops'], label('kube-public'));
    expect(first.code, first.out).toBe(0);
    const clash = await kubectl(v, ['apply', '--server-side', '--field-manager=ops'], label('elsewhere'));
    // Then the fields that were there belong to "before-first-apply" (apimachinery
    // pkg/util/managedfields/internal/skipnonapplied.go), so changing one conflicts with it
    const after = await getJson(v, ['namespace', 'kube-public']);
    expect((after.metadata.managedFields as ManagedFieldsEntry[]).map((m) => [m.manager, m.operation])).toEqual([
      ['before-first-apply', 'Update'],
      ['ops', 'Apply'],
    ]);
    expect(clash.code).not.toBe(0);
    expect(clash.out).toMatch(
      /conflict with "before-first-apply" using v1 at [^ ]+Z: \.metadata\.labels\.kubernetes\.io\/metadata\.name/,
    );
  });

  it('a patch records its manager (kubectl label: kubectl-label), and an apply of that label conflicts', async () => {
    // When kubectl labels the ConfigMap
    const l = await kubectl(v, ['label', 'configmap', 'levels', '-n', ns, 'tier=gold']);
    expect(l.code, l.out).toBe(0);
    const labelled = await getJson(v, ['configmap', 'levels', '-n', ns]);
    const label = (labelled.metadata.managedFields as ManagedFieldsEntry[]).find((m) => m.manager === 'kubectl-label');
    expect(label?.operation).toBe('Update');
    expect(Object.keys(label?.fieldsV1['f:metadata']['f:labels'] ?? {})).toContain('f:tier');
    // Then an apply setting another tier conflicts with it
    const cm = `apiVersion: v1
kind: ConfigMap
metadata: {name: levels, namespace: ${ns}, labels: {tier: silver}}
data: {level: debug}
`;
    const clash = await kubectl(v, ['apply', '--server-side', '--field-manager=ops'], cm);
    expect(clash.code).not.toBe(0);
    expect(clash.out).toMatch(/conflict with "kubectl-label" using v1 at [^:]+:\d\d:\d\dZ: \.metadata\.labels\.tier/);
  });
});

describe('set lists and the client-side apply upgrade (kubectl 1.33)', () => {
  const v = '1.33';
  const ns = 'default';
  const withFinalizers = (name: string, finalizers: string) => `apiVersion: v1
kind: ConfigMap
metadata: {name: ${name}, namespace: ${ns}, finalizers: ${finalizers}}
`;

  it('owns a set list per value (v:"…"): each applier keeps its finalizer and drops only its own', async () => {
    // Given two managers each applying their own finalizer (metadata.finalizers is x-kubernetes-list-type: set)
    const a = await kubectl(v, ['apply', '--server-side', '--field-manager=a'], withFinalizers('held', '[ssa.test/a]'));
    expect(a.code, a.out).toBe(0);
    const b = await kubectl(v, ['apply', '--server-side', '--field-manager=b'], withFinalizers('held', '[ssa.test/b]'));
    expect(b.code, b.out).toBe(0);
    const both = await getJson(v, ['configmap', 'held', '-n', ns]);
    // Then both are there, each owned by value (fieldpath/serialize-pe.go `v:`)
    expect(both.metadata.finalizers).toEqual(['ssa.test/a', 'ssa.test/b']);
    const owned = (o: Record<string, any>, m: string) =>
      Object.keys(
        (o.metadata.managedFields as ManagedFieldsEntry[]).find((e) => e.manager === m)?.fieldsV1['f:metadata'][
          'f:finalizers'
        ] ?? {},
      );
    expect(owned(both, 'a')).toEqual(['v:"ssa.test/a"']);
    expect(owned(both, 'b')).toEqual(['v:"ssa.test/b"']);
    // When a applies no finalizer any more, its own goes and b's stays (merge/update.go prune())
    const none = await kubectl(v, ['apply', '--server-side', '--field-manager=a'], withFinalizers('held', '[]'));
    expect(none.code, none.out).toBe(0);
    const after = await getJson(v, ['configmap', 'held', '-n', ns]);
    expect(after.metadata.finalizers).toEqual(['ssa.test/b']);
  });

  it('kubectl apply --server-side after a client-side apply takes the fields over without a conflict', async () => {
    // Given a ConfigMap applied client-side (kubectl records the manager kubectl-client-side-apply, operation Update)
    const cm = (level: string) => `apiVersion: v1
kind: ConfigMap
metadata: {name: upgraded, namespace: ${ns}}
data: {level: ${level}}
`;
    const csa = await kubectl(v, ['apply'], cm('info'));
    expect(csa.code, csa.out).toBe(0);
    const before = await getJson(v, ['configmap', 'upgraded', '-n', ns]);
    expect((before.metadata.managedFields as ManagedFieldsEntry[]).map((m) => [m.manager, m.operation])).toEqual([
      ['kubectl-client-side-apply', 'Update'],
    ]);
    // When it is applied server-side with another value
    const ssa = await kubectl(v, ['apply', '--server-side'], cm('debug'));
    // Then the apply goes through: the manager "kubectl" may take over fields that the last-applied annotation still
    // holds (apimachinery pkg/util/managedfields/internal/lastappliedmanager.go), kubectl then moves the client-side
    // manager's fields over (client-go util/csaupgrade), and "kubectl" owns data.level
    expect(ssa.code, ssa.out).toBe(0);
    const after = await getJson(v, ['configmap', 'upgraded', '-n', ns]);
    expect(after.data).toEqual({ level: 'debug' });
    const kubectlApply = (after.metadata.managedFields as ManagedFieldsEntry[]).find((m) => m.manager === 'kubectl');
    expect(kubectlApply?.operation).toBe('Apply');
    expect(Object.keys(kubectlApply?.fieldsV1['f:data'] ?? {})).toContain('f:level');
  });
});

describe('custom resources (kubectl 1.33)', () => {
  const v = '1.33';
  const crd = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: routes.ssa.devop.test}
spec:
  group: ssa.devop.test
  scope: Namespaced
  names: {plural: routes, singular: route, kind: Route}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              backends:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  properties:
                    name: {type: string}
                    weight: {type: integer}
              hosts:
                type: array
                items: {type: string}
`;
  const route = (backends: string, hosts: string) => `apiVersion: ssa.devop.test/v1
kind: Route
metadata: {name: front, namespace: default}
spec:
  backends: ${backends}
  hosts: ${hosts}
`;

  it("follows the CRD schema's list types: a map list is owned per key, an unmarked list whole", async () => {
    // Given a CRD whose spec.backends is x-kubernetes-list-type: map keyed by name, and spec.hosts unmarked (atomic)
    const c = await kubectl(v, ['apply', '--server-side', '--field-manager=crd-admin'], crd);
    expect(c.code, c.out).toBe(0);
    await waitFor('the Route kind to be served', async () => (await kubectl(v, ['get', 'routes'])).code === 0, 20_000);
    // When two managers each apply their own backend
    const a = await kubectl(
      v,
      ['apply', '--server-side', '--field-manager=team-a'],
      route('[{name: a, weight: 1}]', '[x]'),
    );
    expect(a.code, a.out).toBe(0);
    const b = await kubectl(
      v,
      ['apply', '--server-side', '--field-manager=team-b'],
      route('[{name: b, weight: 2}]', '[x]'),
    );
    // Then both backends are kept, owned per key (structured-merge-diff typed/merge.go; apiextensions-apiserver
    // serves the CRD's schema to the field manager), and hosts, an atomic list applied with the same value, is
    // shared without conflict
    expect(b.code, b.out).toBe(0);
    const o = await getJson(v, ['route', 'front', '-n', 'default']);
    expect(o.spec.backends).toEqual([
      { name: 'a', weight: 1 },
      { name: 'b', weight: 2 },
    ]);
    const owned = (m: string) =>
      Object.keys(
        (o.metadata.managedFields as ManagedFieldsEntry[]).find((e) => e.manager === m)?.fieldsV1['f:spec'][
          'f:backends'
        ] ?? {},
      );
    expect(owned('team-a')).toEqual(['k:{"name":"a"}']);
    expect(owned('team-b')).toEqual(['k:{"name":"b"}']);
    // And a different hosts list from team-b conflicts with team-a over the whole list
    const clash = await kubectl(v, ['apply', '--server-side', '--field-manager=team-b'], route('[{name: b}]', '[y]'));
    expect(clash.code).not.toBe(0);
    expect(clash.out).toContain('conflict with "team-a": .spec.hosts');
  });
});
