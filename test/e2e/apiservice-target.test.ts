// apiservice/NAME resolution against the stand-in's API server (no node: pods are given a Ready status by hand):
// APIService → Service → its pods in the Service's namespace, on the targetPort (a named one too); each way an
// APIService cannot lead to pods is one line naming it; a change of its Available condition is noticed.
import { ApiregistrationV1Api, CoreV1Api, KubeConfig, type V1Service } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { isUserError } from '../../shared/errors.js';
import { followAvailable } from '../../cli/kube/apiservice-status.js';
import { resolveTarget } from '../../cli/kube/target.js';
import { listTargets } from '../../cli/services/ls.js';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { externalTarget, standinOnly } from '../../testkit/target-cluster.js';

// Pods given a Ready status by hand, APIServices without a backend: only the stand-in's API server without a node.
const it = standinOnly('pods are made Ready by hand on an API server without a node');

let cluster: ClusterHandle;
let kc: KubeConfig;
let core: CoreV1Api;
let registration: ApiregistrationV1Api;

async function apiService(name: string, service?: { namespace: string; name: string; port?: number }): Promise<void> {
  const [version, ...group] = name.split('.');
  await registration.createAPIService({
    body: {
      metadata: { name },
      spec: {
        group: group.join('.'),
        version,
        groupPriorityMinimum: 1000,
        versionPriority: 15,
        insecureSkipTLSVerify: Boolean(service),
        ...(service ? { service } : {}),
      },
    },
  });
}

async function service(namespace: string, name: string, spec: V1Service['spec']): Promise<void> {
  await core.createNamespacedService({ namespace, body: { metadata: { name }, spec } });
}

/** A pod of the Service, Ready on the node (the stand-in without a kubelet leaves status to the test). */
async function readyPod(namespace: string, name: string, labels: Record<string, string>): Promise<void> {
  await core.createNamespacedPod({
    namespace,
    body: {
      metadata: { name, labels },
      spec: {
        nodeName: cluster.nodeName,
        containers: [{ name: 'api', image: 'x', ports: [{ name: 'https', containerPort: 8443 }] }],
      },
    },
  });
  const pod = await core.readNamespacedPod({ namespace, name });
  await core.replaceNamespacedPodStatus({
    namespace,
    name,
    body: {
      ...pod,
      status: {
        phase: 'Running',
        hostIP: cluster.nodeIP,
        podIP: '10.0.0.9',
        conditions: [{ type: 'Ready', status: 'True' }],
        containerStatuses: [
          {
            name: 'api',
            image: 'x',
            imageID: '',
            ready: true,
            restartCount: 0,
            containerID: 'containerd://abc',
            state: { running: { startedAt: new Date() } },
          },
        ],
      },
    },
  });
}

async function failure(target: string): Promise<Error> {
  const err = await resolveTarget(kc, { target, namespace: 'default' }).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(isUserError(err), String(err)).toBe(true);
  return err as Error;
}

beforeAll(async () => {
  if (externalTarget()) return; // every test here is skipped on a real cluster
  cluster = await startCluster({ kubelet: false });
  kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfigPath);
  core = kc.makeApiClient(CoreV1Api);
  registration = kc.makeApiClient(ApiregistrationV1Api);
  await core.createNamespace({ body: { metadata: { name: 'farm' } } });
});

afterAll(async () => {
  await cluster?.stop();
});

describe('apiservice/ targets', () => {
  it('resolve to a Ready pod behind the Service, in its namespace, on the named targetPort', async () => {
    // Given an APIService whose Service (in another namespace than -n) sends port 443 to the pods' port "https"
    await service('farm', 'farm-api', {
      selector: { app: 'farm-api' },
      ports: [{ name: 'https', port: 443, targetPort: 'https' as never }],
    });
    await apiService('v1alpha.farm.example.com', { namespace: 'farm', name: 'farm-api', port: 443 });
    await readyPod('farm', 'farm-api-1', { app: 'farm-api' });
    // When it is resolved from the default namespace
    const resolved = await resolveTarget(kc, { target: 'apiservice/v1alpha.farm.example.com', namespace: 'default' });
    // Then it is that pod, in the Service's namespace, and the port is the named container port
    expect(resolved.podName).toBe('farm-api-1');
    expect(resolved.namespace).toBe('farm');
    expect(resolved.extension).toMatchObject({
      kind: 'apiservice',
      name: 'v1alpha.farm.example.com',
      service: { namespace: 'farm', name: 'farm-api', targetPort: 'https' },
    });
    expect(resolved.ports).toEqual([8443]);
    expect(['True', 'False', 'Unknown']).toContain(resolved.extension?.available.status);
  });

  it('each way an APIService cannot lead to pods is one line naming it', async () => {
    // Given an APIService served by the API server itself, and ones whose Service is missing, lacks the port, or has
    // no selector
    await apiService('v1.local.example.com');
    await apiService('v1.gone.example.com', { namespace: 'farm', name: 'gone', port: 443 });
    await service('farm', 'other-port', { selector: { app: 'x' }, ports: [{ port: 8080 }] });
    await apiService('v1.port.example.com', { namespace: 'farm', name: 'other-port', port: 443 });
    await service('farm', 'by-hand', { ports: [{ port: 443 }] });
    await apiService('v1.hand.example.com', { namespace: 'farm', name: 'by-hand', port: 443 });
    // Then resolving each names the problem
    expect((await failure('apiservice/v1.nothere.example.com')).message).toMatch(
      /^apiservice "v1\.nothere\.example\.com" not found \(APIServices backed by a Service: .*v1alpha\.farm\.example/,
    );
    expect((await failure('apiservice/v1.local.example.com')).message).toContain('is served by the API server itself');
    expect((await failure('apiservice/v1.gone.example.com')).message).toBe(
      'apiservice "v1.gone.example.com" names service farm/gone, which does not exist',
    );
    expect((await failure('apiservice/v1.port.example.com')).message).toBe(
      'service farm/other-port has no port 443, which apiservice "v1.port.example.com" uses',
    );
    expect((await failure('apiservice/v1.hand.example.com')).message).toContain('has no selector');
  });

  it('devop ls lists the APIServices its Services serve, with the pods behind them and the port they are called on', async () => {
    // (the APIServices of the tests above: one on a named port, one whose Service lacks the port, one without a
    // selector, one whose Service is missing, one served by the API server)
    const { targets } = await listTargets({ kubeconfig: cluster.kubeconfigPath, namespace: 'farm' });
    const listed = targets.filter((t) => t.kind === 'apiservice');
    expect(listed.map((t) => [t.target, `${t.ready}/${t.total}`, t.ports, t.containers]).sort()).toEqual(
      [
        ['apiservice/v1alpha.farm.example.com', '1/1', [8443], ['api']],
        ['apiservice/v1.port.example.com', '0/0', [], []],
        ['apiservice/v1.hand.example.com', '0/0', [443], []],
      ].sort(),
    );
    expect((await listTargets({ kubeconfig: cluster.kubeconfigPath, namespace: 'default' })).targets).toEqual([]);
  });

  it('a change of the Available condition during the session is reported', async () => {
    // Given an APIService whose Service is missing (the stand-in's aggregator marks it unavailable), followed from a
    // session that read it as available
    await apiService('v1.flaky.example.com', { namespace: 'farm', name: 'flaky', port: 443 });
    const seen: { status: string; reason?: string }[] = [];
    const stop = followAvailable(
      kc,
      'v1.flaky.example.com',
      { status: 'True', reason: 'Passed' },
      (a) => seen.push(a),
      50,
    );
    try {
      // Then the new condition is reported once, with its reason
      const deadline = Date.now() + 30_000;
      while (seen.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      await new Promise((r) => setTimeout(r, 200));
      expect(seen).toEqual([expect.objectContaining({ status: 'False', reason: 'ServiceNotFound' })]);
    } finally {
      stop();
    }
  });
});
