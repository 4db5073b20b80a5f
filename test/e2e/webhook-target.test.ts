// Webhook configuration targets resolve through the webhooks' Service: the pods it selects (in the Service's
// namespace), the container and port its targetPort names, each webhook's timeoutSeconds; bad targets get one line.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  AdmissionregistrationV1Api,
  BatchV1Api,
  CoreV1Api,
  KubeConfig,
  type V1ValidatingWebhook,
} from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveTarget } from '../../cli/kube/target.js';
import { UserError } from '../../shared/errors.js';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { writeKubeconfig } from '../../standin/kubeconfig.js';
import { DevopRun, devopExec } from '../../testkit/e2e.js';

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
  if (dir) rmSync(dir, { recursive: true, force: true });
});

let dir: string | undefined;
/** A kubeconfig for a new user of this cluster with these rules (the stand-in's RBAC), namespace "default". */
async function kubeconfigFor(user: string, rules: Parameters<ClusterHandle['controlPlane']['auth']['issue']>[2]) {
  dir ??= mkdtempSync(join(tmpdir(), 'devop-e2e-hooks-'));
  const path = join(dir, `kubeconfig-${user}`);
  const token = cluster.controlPlane.auth.issue(user, ['system:authenticated'], rules);
  const caPem = readFileSync(cluster.caPath, 'utf8');
  const users = [{ name: user, token }];
  await writeKubeconfig({
    path,
    clusterName: 'standin',
    server: cluster.server,
    caPem,
    users,
    current: user,
    namespace: 'default',
  });
  return path;
}

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

  it("checks a user's rights in the Service's namespace, not in -n, and puts the agent there", async () => {
    // Given a user who may do everything in "hooks", the webhooks' Service's namespace, and read the configurations,
    // but nothing in "default", the kubeconfig's namespace
    const kubeconfig = await kubeconfigFor('hooks-dev', [
      { verbs: ['*'], apiGroups: ['*'], resources: ['*'], namespaces: ['hooks'] },
      {
        verbs: ['get', 'list'],
        apiGroups: ['admissionregistration.k8s.io'],
        resources: ['validatingwebhookconfigurations'],
      },
    ]);
    const target = 'validatingwebhookconfiguration/checks';
    // When doctor checks that target
    const doctor = new DevopRun(['doctor', '--kubeconfig', kubeconfig, '-t', target]);
    await doctor.exited;
    // Then every RBAC check is made in "hooks", and passes
    const rbac = doctor.stdout.split('\n').filter((line) => / RBAC /.test(line));
    expect(rbac.length, doctor.output).toBeGreaterThan(3);
    for (const line of rbac) expect(line, doctor.output).toMatch(/^✓ RBAC .* in hooks: allowed/);
    // When a session starts on it (this cluster has no node: the agent's pod never runs)
    const exec = devopExec({ kubeconfigPath: kubeconfig }, ['-t', target, '--startup-timeout', '2'], ['true']);
    const exit = await exec.exited;
    expect(exit.code, exec.output).toBe(1);
    expect(exec.stderr, exec.output).toMatch(/✓ resolve target .*: pod hooked-1 /);
    // Then the preflight passed, and the agent's Job was made: this user may make one in "hooks" only. It never runs
    // (this cluster has no node), and it is gone when devop gives up.
    expect(exec.stderr, exec.output).toMatch(/✗ agent for pod hooked-1: the agent Job devop-agent-\S+ did not start /);
    const batch = kc.makeApiClient(BatchV1Api);
    for (const namespace of ['hooks', 'default'])
      expect((await batch.listNamespacedJob({ namespace })).items.map((j) => j.metadata?.name)).toEqual([]);
  });

  it('a user who may not read the configuration is told so in one line naming no namespace (it is cluster-scoped)', async () => {
    const kubeconfig = await kubeconfigFor('no-hooks', [
      { verbs: ['*'], apiGroups: ['*'], resources: ['*'], namespaces: ['hooks'] },
    ]);
    const denied = new KubeConfig();
    denied.loadFromFile(kubeconfig);
    const err = await resolveTarget(denied, {
      target: 'validatingwebhookconfiguration/checks',
      namespace: 'default',
    }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(UserError);
    expect((err as UserError).message).toBe(
      'forbidden: cannot get validatingwebhookconfigurations.admissionregistration.k8s.io (needed to find the target ' +
        'checks)',
    );
  });

  it("devop ls lists a webhook configuration in its Service's namespace; a user who may not list it gets the rest", async () => {
    // When the webhooks' Service's namespace is listed
    const table = new DevopRun(['ls', '--kubeconfig', cluster.kubeconfigPath, '-n', 'hooks']);
    expect((await table.exited).code, table.output).toBe(0);
    // Then the configuration is a target, with the pods behind the Service, the port the webhooks call, the containers
    expect(table.stdout, table.output).toMatch(
      /^validatingwebhookconfiguration\/checks\s+1\/1\s+8443\s+sidecar,server$/m,
    );
    expect(table.stdout).toMatch(/^pod\/hooked-1\s+/m);
    // And the one that calls a URL is not (no Service of this namespace serves it), nor is any in another namespace
    expect(table.stdout).not.toMatch(/by-url/);
    const elsewhere = new DevopRun(['ls', '--kubeconfig', cluster.kubeconfigPath, '-n', 'default']);
    expect((await elsewhere.exited).code, elsewhere.output).toBe(0);
    expect(elsewhere.stdout).not.toMatch(/webhookconfiguration/);
    // When a user who may not list webhook configurations (cluster-scoped) lists the namespace
    const kubeconfig = await kubeconfigFor('hooks-only', [
      { verbs: ['*'], apiGroups: ['*'], resources: ['*'], namespaces: ['hooks'] },
    ]);
    const limited = new DevopRun(['ls', '--kubeconfig', kubeconfig, '-n', 'hooks']);
    // Then the namespace's own targets are listed, without an error
    expect((await limited.exited).code, limited.output).toBe(0);
    expect(limited.stdout).toMatch(/^pod\/hooked-1\s+/m);
    expect(limited.stdout).not.toMatch(/webhookconfiguration/);
    expect(limited.stderr).toBe('');
    // And one who may list the workloads and pods but not the Services gets them too
    const noServices = await kubeconfigFor('no-services', [
      {
        verbs: ['list'],
        apiGroups: ['', 'apps'],
        resources: ['pods', 'deployments', 'statefulsets'],
        namespaces: ['hooks'],
      },
    ]);
    const workloads = new DevopRun(['ls', '--kubeconfig', noServices, '-n', 'hooks']);
    expect((await workloads.exited).code, workloads.output).toBe(0);
    expect(workloads.stdout).toMatch(/^pod\/hooked-1\s+/m);
  });
});
