// Webhook configuration targets resolve through the webhooks' Service: the pods it selects (in the Service's
// namespace), the container and port its targetPort names, each webhook's timeoutSeconds; bad targets get one line.
import { AdmissionregistrationV1Api, CoreV1Api, KubeConfig, type V1ValidatingWebhook } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveTarget } from '../../cli/kube/target.js';
import { UserError } from '../../shared/errors.js';
import { startCluster, type ClusterHandle } from '../cluster/index.js';

let cluster: ClusterHandle;
let kc: KubeConfig;

/** A pod the way a kubelet reports it once its container runs and is Ready (this cluster has no kubelet). */
async function readyPod(core: CoreV1Api, name: string, labels: Record<string, string>): Promise<void> {
  const namespace = 'hooks';
  const created = await core.createNamespacedPod({
    namespace,
    body: {
      metadata: { name, labels },
      spec: {
        nodeName: cluster.nodeName,
        containers: [
          { name: 'sidecar', image: 'devop.test/shell' },
          { name: 'server', image: 'devop.test/echo-controller', ports: [{ name: 'webhook', containerPort: 8443 }] },
        ],
      },
    },
  });
  const running = { running: { startedAt: new Date() } };
  await core.replaceNamespacedPodStatus({
    namespace,
    name,
    body: {
      ...created,
      status: {
        phase: 'Running',
        podIP: '10.0.0.9',
        conditions: [{ type: 'Ready', status: 'True' }],
        containerStatuses: ['sidecar', 'server'].map((c) => ({
          name: c,
          image: 'i',
          imageID: '',
          ready: true,
          restartCount: 0,
          containerID: `containerd://${name}-${c}`,
          state: running,
        })),
      },
    },
  });
}

const hook = (name: string, more: Partial<V1ValidatingWebhook> = {}): V1ValidatingWebhook => ({
  name,
  admissionReviewVersions: ['v1'],
  sideEffects: 'None',
  clientConfig: { service: { namespace: 'hooks', name: 'hook-svc', path: '/validate' } },
  rules: [{ operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['configmaps'] }],
  // Nothing matches in this suite: writes here are not sent to a webhook nobody serves.
  objectSelector: { matchLabels: { never: 'matches' } },
  ...more,
});

beforeAll(async () => {
  cluster = await startCluster({ kubelet: false });
  kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfigPath);
  const core = kc.makeApiClient(CoreV1Api);
  await core.createNamespace({ body: { metadata: { name: 'hooks' } } });
  await core.createNamespacedService({
    namespace: 'hooks',
    body: {
      metadata: { name: 'hook-svc' },
      spec: { selector: { app: 'hooked' }, ports: [{ name: 'https', port: 443, targetPort: 'webhook' }] },
    },
  });
  await readyPod(core, 'hooked-1', { app: 'hooked' });
  const admission = kc.makeApiClient(AdmissionregistrationV1Api);
  await admission.createValidatingWebhookConfiguration({
    body: {
      metadata: { name: 'checks' },
      webhooks: [hook('a.example.com', { timeoutSeconds: 3 }), hook('b.example.com')],
    },
  });
  await admission.createMutatingWebhookConfiguration({
    body: {
      metadata: { name: 'by-url' },
      webhooks: [{ ...hook('url.example.com'), clientConfig: { url: 'https://example.com/mutate' } }],
    },
  });
});

afterAll(async () => {
  await cluster?.stop();
});

async function refusal(target: string): Promise<UserError> {
  try {
    await resolveTarget(kc, { target, namespace: 'default' });
  } catch (err) {
    if (err instanceof UserError) return err;
    throw err;
  }
  throw new Error(`${target} resolved`);
}

describe('webhook configuration targets', () => {
  it('resolve to a pod behind the Service, in its namespace, with the targetPort and the webhooks', async () => {
    // When the configuration is the target (from another namespace: it is cluster-scoped)
    const t = await resolveTarget(kc, { target: 'validatingwebhookconfiguration/checks', namespace: 'default' });
    // Then the pod, the container that declares the named targetPort, and every webhook with its timeout
    expect(t.namespace).toBe('hooks');
    expect(t.podName).toBe('hooked-1');
    expect(t.container.name).toBe('server');
    expect(t.containerReason).toBe('serves port 8443');
    expect(t.ports).toEqual([8443]);
    expect(t.webhooks).toEqual([
      { name: 'a.example.com', timeoutSeconds: 3 },
      { name: 'b.example.com', timeoutSeconds: 10 },
    ]);
    // And /webhook/NAME picks one
    const one = await resolveTarget(kc, {
      target: 'validatingwebhookconfigurations/checks/webhook/b.example.com',
      namespace: 'default',
    });
    expect(one.webhooks).toEqual([{ name: 'b.example.com', timeoutSeconds: 10 }]);
  });

  it('refuse a missing configuration or webhook, and a webhook called by URL, in one line', async () => {
    expect((await refusal('validatingwebhookconfiguration/nope')).message).toBe(
      'validatingwebhookconfiguration "nope" not found (validatingwebhookconfigurations there: checks)',
    );
    expect((await refusal('validatingwebhookconfiguration/checks/webhook/c.example.com')).message).toBe(
      'validatingwebhookconfiguration "checks" has no webhook "c.example.com" (webhooks: a.example.com, b.example.com)',
    );
    const url = await refusal('mutatingwebhookconfiguration/by-url');
    expect(url.message).toBe(
      'webhook "url.example.com" of mutatingwebhookconfiguration "by-url" calls a URL, not a Service: ' +
        'devop cannot take its requests',
    );
    expect(url.hint).toMatch(/clientConfig.service/);
  });
});
