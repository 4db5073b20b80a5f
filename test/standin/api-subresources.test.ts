// The write subresources devop and kubectl use, over client-node and plain HTTPS, as kube-apiserver serves them:
// status (spec and, for a Deployment, labels kept), scale (autoscaling/v1 Scale, conflicts on a stale
// resourceVersion), ephemeralcontainers (what devop's replaceNamespacedPodEphemeralcontainers sends: only the
// ephemeral containers change, a stale resourceVersion is a 409 devop retries on) and eviction.
import { AppsV1Api, CoreV1Api, KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { expectStatus, rawRequest } from '../../testkit/api-requests.js';
import { waitFor } from '../../testkit/wait.js';

let cluster: ClusterHandle;
let core: CoreV1Api;
let apps: AppsV1Api;
const namespace = 'default';
const deployments = `/apis/apps/v1/namespaces/${namespace}/deployments`;

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

const admin = (method: string, path: string, body?: object, headers?: Record<string, string>) =>
  rawRequest(cluster, cluster.adminToken, method, path, body, headers);

async function deployment(name: string, replicas: number) {
  return apps.createNamespacedDeployment({
    namespace,
    body: {
      metadata: { name, labels: { team: 'a' } },
      spec: {
        replicas,
        selector: { matchLabels: { app: name } },
        template: {
          metadata: { labels: { app: name } },
          spec: { containers: [{ name: 'app', image: 'devop.test/shell' }] },
        },
      },
    },
  });
}

describe('status (kubernetes pkg/registry/apps/deployment/strategy.go, core/pod/strategy.go: statusStrategy)', () => {
  it('a status update keeps the spec (and a Deployment’s labels): only the status is written', async () => {
    // Given a Deployment with 1 replica and a label
    const d = await deployment('status-web', 1);
    // When its status is replaced (unconditionally: its controller writes it too) by a body that also changes the
    // spec and the labels
    const answer = await admin('PUT', `${deployments}/status-web/status`, {
      ...d,
      metadata: { ...d.metadata, resourceVersion: undefined, labels: { team: 'b' } },
      spec: { ...d.spec, replicas: 7 },
      status: { replicas: 1, unavailableReplicas: 1 },
    });
    // Then the status is taken and the spec and labels are as they were
    expect(answer.status).toBe(200);
    expect(answer.body.spec.replicas).toBe(1);
    expect(answer.body.metadata.labels).toEqual({ team: 'a' });
    expect(answer.body.status).toMatchObject({ replicas: 1, unavailableReplicas: 1 });
    expect(answer.body.metadata.generation).toBe(d.metadata?.generation);
    // And a pod's status update does not touch its spec either
    await core.createNamespacedPod({
      namespace,
      body: { metadata: { name: 'status-pod' }, spec: { containers: [{ name: 'app', image: 'devop.test/shell' }] } },
    });
    const pod = await core.readNamespacedPod({ namespace, name: 'status-pod' });
    const podAnswer = await admin('PUT', `/api/v1/namespaces/${namespace}/pods/status-pod/status`, {
      ...pod,
      metadata: { ...pod.metadata, resourceVersion: undefined }, // the scheduler's binding may come first
      spec: { ...pod.spec, activeDeadlineSeconds: 5 },
      status: { ...pod.status, message: 'set through status' },
    });
    expect(podAnswer.status).toBe(200);
    expect(podAnswer.body.spec.activeDeadlineSeconds).toBeUndefined();
    expect(podAnswer.body.status.message).toBe('set through status');
  });
});

describe('scale (kubernetes pkg/registry/apps/deployment/storage/storage.go ScaleREST)', () => {
  it('answers an autoscaling/v1 Scale, sets spec.replicas through it, and refuses a stale resourceVersion', async () => {
    // Given a Deployment with 2 replicas
    const first = await deployment('scaled', 2);
    // When its scale is read, Then it is a Scale with the replicas and the selector as a string
    const scale = await admin('GET', `${deployments}/scaled/scale`);
    expect(scale.body).toMatchObject({
      kind: 'Scale',
      apiVersion: 'autoscaling/v1',
      metadata: { name: 'scaled', namespace },
      spec: { replicas: 2 },
      status: { selector: 'app=scaled' },
    });
    // When the scale is written with 4 replicas and no resourceVersion (as kubectl scale does), Then the Deployment
    // has 4
    const unconditional = { ...scale.body, metadata: { ...scale.body.metadata, resourceVersion: undefined } };
    const put = await admin('PUT', `${deployments}/scaled/scale`, { ...unconditional, spec: { replicas: 4 } });
    expect(put.status).toBe(200);
    expect(put.body.spec.replicas).toBe(4);
    const after = await apps.readNamespacedDeployment({ namespace, name: 'scaled' });
    expect(after.spec?.replicas).toBe(4);
    expect(after.metadata?.generation).toBe((first.metadata?.generation ?? 0) + 1);
    // When the resourceVersion the Deployment had before is sent, Then it is a 409 and nothing changes
    const created = { ...scale.body.metadata, resourceVersion: first.metadata?.resourceVersion };
    const stale = await admin('PUT', `${deployments}/scaled/scale`, { metadata: created, spec: { replicas: 9 } });
    expect(stale.status).toBe(409);
    expect(stale.body.reason).toBe('Conflict');
    const still = await apps.readNamespacedDeployment({ namespace, name: 'scaled' });
    expect(still.spec?.replicas).toBe(4);
  });
});

describe('ephemeralcontainers (kubernetes pkg/registry/core/pod/strategy.go dropNonEphemeralContainerUpdates)', () => {
  it('adds the ephemeral container and nothing else; a stale resourceVersion is a 409', async () => {
    // Given a pod
    await core.createNamespacedPod({
      namespace,
      body: { metadata: { name: 'debugged' }, spec: { containers: [{ name: 'app', image: 'devop.test/shell' }] } },
    });
    // (once scheduled: the binding is a write of its own that moves the resourceVersion)
    const pod = await waitFor('the pod scheduled', async () => {
      const p = await core.readNamespacedPod({ namespace, name: 'debugged' });
      return p.spec?.nodeName ? p : undefined;
    });
    // When devop's update adds an ephemeral container (and the body also carries another image for the app)
    const body: V1Pod = {
      ...pod,
      metadata: { ...pod.metadata, labels: { changed: 'yes' } },
      spec: {
        ...pod.spec!,
        containers: [{ ...pod.spec!.containers[0], image: 'devop.test/other' }],
        ephemeralContainers: [{ name: 'agent', image: 'devop.test/shell', targetContainerName: 'app' }],
      },
    };
    const updated = await core.replaceNamespacedPodEphemeralcontainers({ namespace, name: 'debugged', body });
    // Then only the ephemeral container is new, defaulted as a container is
    expect(updated.spec?.ephemeralContainers?.[0]).toMatchObject({
      name: 'agent',
      targetContainerName: 'app',
      terminationMessagePolicy: 'File',
      imagePullPolicy: 'Always', // an untagged image is :latest
    });
    expect(updated.spec?.containers[0].image).toBe('devop.test/shell');
    // When the same body (now stale) is sent again, Then it is a 409, which devop re-reads and retries on
    const stale = await expectStatus(
      core.replaceNamespacedPodEphemeralcontainers({ namespace, name: 'debugged', body }),
    );
    expect(stale.code).toBe(409);
  });
});

describe('eviction (kubernetes pkg/registry/core/pod/storage/eviction.go)', () => {
  it('an Eviction deletes the pod gracefully and answers a Success Status; a missing pod is a 404', async () => {
    // Given a pod
    await core.createNamespacedPod({
      namespace,
      body: { metadata: { name: 'evicted' }, spec: { containers: [{ name: 'app', image: 'devop.test/shell' }] } },
    });
    // When it is evicted
    const answer = await admin('POST', `/api/v1/namespaces/${namespace}/pods/evicted/eviction`, {
      apiVersion: 'policy/v1',
      kind: 'Eviction',
      metadata: { name: 'evicted', namespace },
    });
    // Then the answer is 201 with a Success Status and the pod is being deleted (or gone)
    expect(answer.status).toBe(201);
    expect(answer.body).toMatchObject({ kind: 'Status', status: 'Success' });
    const left = await core.readNamespacedPod({ namespace, name: 'evicted' }).catch(() => undefined);
    if (left) expect(left.metadata?.deletionTimestamp).toBeTruthy();
    // And evicting a pod that does not exist is a 404
    const missing = await admin('POST', `/api/v1/namespaces/${namespace}/pods/nobody/eviction`, {
      apiVersion: 'policy/v1',
      kind: 'Eviction',
      metadata: { name: 'nobody', namespace },
    });
    expect(missing.status).toBe(404);
  });
});

describe('eviction with a PodDisruptionBudget (eviction.go checkAndDecrement; pkg/controller/disruption)', () => {
  /** A pod with label app=guarded, made Running and Ready (no kubelet here: its status is written directly). */
  async function runningPod(name: string): Promise<void> {
    await core.createNamespacedPod({
      namespace,
      body: {
        metadata: { name, labels: { app: 'guarded' } },
        spec: { containers: [{ name: 'app', image: 'devop.test/shell' }] },
      },
    });
    const pod = await core.readNamespacedPod({ namespace, name });
    const answer = await admin('PUT', `/api/v1/namespaces/${namespace}/pods/${name}/status`, {
      ...pod,
      metadata: { ...pod.metadata, resourceVersion: undefined },
      status: { phase: 'Running', conditions: [{ type: 'Ready', status: 'True' }] },
    });
    expect(answer.status).toBe(200);
  }
  const evict = (name: string) =>
    admin('POST', `/api/v1/namespaces/${namespace}/pods/${name}/eviction`, {
      apiVersion: 'policy/v1',
      kind: 'Eviction',
      metadata: { name, namespace },
    });
  const budget = async () =>
    (await admin('GET', `/apis/policy/v1/namespaces/${namespace}/poddisruptionbudgets/guard`)).body.status;

  it('allows evictions down to minAvailable, then answers 429 with the budget as the cause', async () => {
    // Given two Ready pods and a budget that needs one
    await runningPod('guarded-a');
    await runningPod('guarded-b');
    const created = await admin('POST', `/apis/policy/v1/namespaces/${namespace}/poddisruptionbudgets`, {
      apiVersion: 'policy/v1',
      kind: 'PodDisruptionBudget',
      metadata: { name: 'guard' },
      spec: { minAvailable: 1, selector: { matchLabels: { app: 'guarded' } } },
    });
    expect(created.status).toBe(201);
    // Then its status says one disruption is allowed
    const status = await waitFor('the budget processed', async () => {
      const s = await budget();
      return s?.observedGeneration === 1 && s.currentHealthy === 2 ? s : undefined;
    });
    expect(status).toMatchObject({ expectedPods: 2, desiredHealthy: 1, disruptionsAllowed: 1 });
    // When one pod is evicted, Then it goes and the budget records it
    const first = await evict('guarded-a');
    expect(first.status).toBe(201);
    expect((await budget()).disruptedPods).toHaveProperty('guarded-a');
    await waitFor('the budget recounted', async () => (await budget()).currentHealthy === 1);
    // When the other is evicted, Then it is kube-apiserver's 429 and the pod stays
    const second = await evict('guarded-b');
    expect(second.status).toBe(429);
    expect(second.body).toMatchObject({
      reason: 'TooManyRequests',
      message: "Cannot evict pod as it would violate the pod's disruption budget.",
      details: {
        causes: [
          {
            reason: 'DisruptionBudget',
            message: 'The disruption budget guard needs 1 healthy pods and has 1 currently',
          },
        ],
      },
    });
    expect((await core.readNamespacedPod({ namespace, name: 'guarded-b' })).metadata?.deletionTimestamp).toBeFalsy();
  });
});
