// Pod Security admission: namespaces labelled pod-security.kubernetes.io/enforce refuse pods their level forbids with
// kube-apiserver's 403 (k8s.io/pod-security-admission admission/admission.go, policy/check_*.go, policy/checks.go),
// `warn` adds a Warning header, and the Job controller turns a refused pod into FailedCreate events
// (kubernetes pkg/controller/controller_utils.go, pkg/controller/job/job_controller.go).
import { BatchV1Api, CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { rawRequest } from '../../testkit/api-requests.js';
import { waitFor } from '../../testkit/wait.js';

let cluster: ClusterHandle;
let core: CoreV1Api;
let batch: BatchV1Api;

beforeAll(async () => {
  cluster = await startCluster({ kubelet: false });
  const kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfigPath);
  core = kc.makeApiClient(CoreV1Api);
  batch = kc.makeApiClient(BatchV1Api);
  const namespace = (name: string, labels: Record<string, string>) =>
    core.createNamespace({ body: { metadata: { name, labels } } });
  await namespace('open', {});
  await namespace('base', { 'pod-security.kubernetes.io/enforce': 'baseline' });
  await namespace('strict', { 'pod-security.kubernetes.io/enforce': 'restricted' });
  await namespace('warned', {
    'pod-security.kubernetes.io/enforce': 'baseline',
    'pod-security.kubernetes.io/warn': 'restricted',
    'pod-security.kubernetes.io/warn-version': 'v1.33',
  });
});

afterAll(async () => {
  await cluster?.stop();
});

/** A pod asking for what devop's agent asks for: the host's PID namespace, NET_ADMIN, privileged, a hostPath. */
const hostPod = (name: string) => ({
  metadata: { name },
  spec: {
    hostPID: true,
    hostNetwork: true,
    containers: [
      {
        name: 'agent',
        image: 'agent:dev',
        ports: [{ containerPort: 80, hostPort: 8080 }],
        securityContext: { privileged: true, capabilities: { add: ['NET_ADMIN', 'SYS_PTRACE', 'CHOWN'] } },
        volumeMounts: [{ name: 'netns', mountPath: '/run/netns' }],
      },
    ],
    volumes: [{ name: 'netns', hostPath: { path: '/run/netns' } }],
  },
});

const createPod = (ns: string, pod: object) =>
  rawRequest(cluster, cluster.adminToken, 'POST', `/api/v1/namespaces/${ns}/pods`, pod);

describe('Pod Security admission on pod create (pod-security-admission admission/admission.go)', () => {
  it('a baseline namespace refuses host namespaces, a hostPath, host ports, privileged and NET_ADMIN', async () => {
    // Given a namespace labelled enforce=baseline
    // When a pod asking for the host's namespaces and more is created
    const answer = await createPod('base', hostPod('agent-x'));
    // Then kube-apiserver's 403 names every baseline check it fails, in upstream's order
    expect(answer.status).toBe(403);
    expect(answer.body.reason).toBe('Forbidden');
    expect(answer.body.message).toBe(
      'pods "agent-x" is forbidden: violates PodSecurity "baseline:latest": ' +
        'non-default capabilities (container "agent" must not include "NET_ADMIN", "SYS_PTRACE" in ' +
        'securityContext.capabilities.add), host namespaces (hostNetwork=true, hostPID=true), ' +
        'hostPath volumes (volume "netns"), hostPort (container "agent" uses hostPort 8080), ' +
        'privileged (container "agent" must not set securityContext.privileged=true)',
    );
    // And nothing was stored
    expect((await core.listNamespacedPod({ namespace: 'base' })).items).toHaveLength(0);
  });

  it('a restricted namespace refuses a plain pod, admits one running as non-root with RuntimeDefault', async () => {
    // Given a namespace labelled enforce=restricted
    const plain = { metadata: { name: 'plain' }, spec: { containers: [{ name: 'app', image: 'app:1' }] } };
    // When a pod that sets no security context is created
    const refused = await createPod('strict', plain);
    // Then the restricted checks are named, as policy/check_*.go word them
    expect(refused.status).toBe(403);
    expect(refused.body.message).toBe(
      'pods "plain" is forbidden: violates PodSecurity "restricted:latest": ' +
        'allowPrivilegeEscalation != false ' +
        '(container "app" must set securityContext.allowPrivilegeEscalation=false), ' +
        'unrestricted capabilities (container "app" must set securityContext.capabilities.drop=["ALL"]), ' +
        'runAsNonRoot != true (pod or container "app" must set securityContext.runAsNonRoot=true), ' +
        'seccompProfile (pod or container "app" must set securityContext.seccompProfile.type to ' +
        '"RuntimeDefault" or "Localhost")',
    );
    // When the pod sets what restricted asks for
    const hardened = {
      metadata: { name: 'hardened' },
      spec: {
        securityContext: { runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } },
        containers: [
          {
            name: 'app',
            image: 'app:1',
            securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] } },
          },
        ],
        volumes: [{ name: 'scratch', emptyDir: {} }],
      },
    };
    // Then it is created
    expect((await createPod('strict', hardened)).status).toBe(201);
  });

  it('an unlabelled namespace admits the same pod (privileged)', async () => {
    // Given a namespace with no pod-security labels, When the host pod is created, Then it is stored
    expect((await createPod('open', hostPod('agent-x'))).status).toBe(201);
  });

  it('warn=restricted admits a baseline pod with a Warning naming the policy and its version label', async () => {
    // Given enforce=baseline, warn=restricted (warn-version v1.33)
    const pod = { metadata: { name: 'web' }, spec: { containers: [{ name: 'web', image: 'web:1' }] } };
    // When a pod that passes baseline but not restricted is created
    const answer = await createPod('warned', pod);
    // Then it is created, with one Warning as kube-apiserver sends it (k8s.io/apiserver pkg/warning)
    expect(answer.status).toBe(201);
    const warning = String(answer.headers.warning);
    expect(warning).toMatch(/^299 - "would violate PodSecurity \\"restricted:v1\.33\\": allowPrivilegeEscalation/);
    expect(warning).toContain('seccompProfile (pod or container \\"web\\" must set');
  });
});

describe('the Job controller and a refused pod (pkg/controller/job/job_controller.go)', () => {
  it('records FailedCreate with the admission message, creates no pod, and retries with back-off', async () => {
    // Given a baseline namespace
    // When a Job whose pod template asks for the host's PID namespace is created
    const created = Date.now();
    await batch.createNamespacedJob({
      namespace: 'base',
      body: {
        metadata: { name: 'agent' },
        spec: { template: { metadata: {}, spec: { ...hostPod('x').spec, restartPolicy: 'Never' } } },
      },
    });
    const failedCreates = async () =>
      (await core.listNamespacedEvent({ namespace: 'base' })).items.filter(
        (e) => e.involvedObject?.kind === 'Job' && e.reason === 'FailedCreate',
      );
    await waitFor('a retried create', async () => ((await failedCreates()).length >= 2 ? true : undefined), 15_000);
    await new Promise((r) => setTimeout(r, Math.max(0, 6000 - (Date.now() - created))));
    const failed = await failedCreates();
    const seconds = (Date.now() - created) / 1000;
    // Then the Job has FailedCreate warnings worded as RealPodControl words them, and no pod exists
    expect(failed[0]?.type).toBe('Warning');
    expect(failed[0]?.message).toMatch(
      new RegExp(
        '^Error creating: pods "agent-[a-z0-9]{5}" is forbidden: violates PodSecurity "baseline:latest": ' +
          '.*host namespaces \\(hostNetwork=true, hostPID=true\\)',
      ),
    );
    expect((await core.listNamespacedPod({ namespace: 'base' })).items).toHaveLength(0);
    // And it retried, backing off (1 s, 2 s, 4 s… up to 1 min): tries at 0, 1, 3, 7 s…, so at most 1 + log2(t + 1) of
    // them in t seconds (a busy machine makes fewer), not one a resync (1 s) or one a change
    expect(failed.length).toBeLessThanOrEqual(1 + Math.floor(Math.log2(seconds + 1)));
  });
});
