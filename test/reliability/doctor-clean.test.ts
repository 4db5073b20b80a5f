// `devop doctor` and `devop clean` against the stand-in: doctor names the permission a restricted user lacks and a Pod
// Security label that would reject the agent; clean lists (--dry-run) and then removes a planted agent Job and an
// expired steal Lease, and leaves a live Lease alone.
import { BatchV1Api, CoordinationV1Api, V1MicroTime } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AGENT_ANNOTATIONS, AGENT_LABELS } from '../../shared/agent-contract.js';
import { LEASE_LABEL, LEASE_LABEL_VALUE } from '../../cli/kube/steal-lease.js';
import { requireRoot } from '../../testkit/root.js';
import { DevopRun, deployEcho, startE2ECluster, type Cluster } from '../../testkit/e2e.js';
import { waitFor } from '../../testkit/wait.js';

requireRoot('reliability: doctor and clean');

describe('devop doctor and devop clean', () => {
  let cluster: Cluster;
  let env: Awaited<ReturnType<typeof startE2ECluster>>;

  beforeAll(async () => {
    env = await startE2ECluster();
    cluster = env.cluster;
    await deployEcho(env, 'echo');
  });

  afterAll(async () => {
    await cluster?.stop();
  });

  it('doctor: every check passes for the admin, one line each, exit 0', async () => {
    const run = new DevopRun(['doctor', '--kubeconfig', cluster.kubeconfigPath, '-t', 'deploy/echo']);
    const { code } = await run.exited;
    expect(code, run.output).toBe(0);
    expect(run.stdout).toMatch(/^✓ API server: .* answers, Kubernetes v1\./m);
    expect(run.stdout).toMatch(/^✓ RBAC create pods\/portforward in default: allowed/m);
    expect(run.stdout).toMatch(/^✓ node container runtime: standin-node: containerd:\/\/1\.7/m);
    expect(run.stdout).toMatch(/^✓ target deploy\/echo: pod echo-/m);
    expect(run.stdout).toMatch(/^✓ Pod Security admission \(namespace default\)/m);
    expect(run.stdout).not.toMatch(/^✗/m);
  });

  it('doctor with a restricted token names each missing permission with its fix, exit 1', async () => {
    const run = new DevopRun(['doctor', '--kubeconfig', cluster.restrictedKubeconfigPath]);
    const { code } = await run.exited;
    expect(code, run.output).toBe(1);
    expect(run.stdout).toMatch(/^✓ RBAC get pods in default: allowed/m);
    expect(run.stdout).toMatch(
      new RegExp(
        /^✗ RBAC create pods\/portforward in default: devop-restricted may not create pods\/portforward in /.source +
          /namespace default/.source,
        'm',
      ),
    );
    expect(run.stdout).toMatch(
      new RegExp(
        /^✗ RBAC create jobs\.batch in default: .*\n {4}fix: ask a cluster admin for a Role granting /.source +
          /"create" on "jobs" \(apiGroup batch\) in default$/.source,
        'm',
      ),
    );
    expect(run.stdout).toMatch(/^devop doctor: \d+ checks failed$/m);
  });

  it('doctor --output json flags a namespace whose Pod Security level rejects the agent', async () => {
    await env.core.createNamespace({
      body: { metadata: { name: 'locked', labels: { 'pod-security.kubernetes.io/enforce': 'restricted' } } },
    });
    const run = new DevopRun(['doctor', '--kubeconfig', cluster.kubeconfigPath, '-n', 'locked', '--output', 'json']);
    const { code } = await run.exited;
    expect(code, run.output).toBe(1);
    const report = JSON.parse(run.stdout) as {
      ok: boolean;
      checks: { id: string; status: string; detail: string; fix?: string }[];
    };
    expect(report.ok).toBe(false);
    const psa = report.checks.find((c) => c.id === 'pod-security');
    expect(psa?.status).toBe('fail');
    expect(psa?.detail).toContain('enforce=restricted rejects the agent');
    expect(psa?.fix).toContain('--agent-namespace');
  });

  it('clean --dry-run lists a planted agent Job and an expired Lease; clean removes them and keeps a live Lease', async () => {
    const batch = env.kc.makeApiClient(BatchV1Api);
    const leases = env.kc.makeApiClient(CoordinationV1Api);
    const labels = {
      [AGENT_LABELS.name]: AGENT_LABELS.nameValue,
      [AGENT_LABELS.managedBy]: AGENT_LABELS.managedByValue,
      [AGENT_LABELS.targetPod]: 'ghost-pod',
      [AGENT_LABELS.targetUid]: 'no-such-uid',
    };
    // Given: an agent Job whose target pod no longer exists (its CLI was killed and the pod replaced)…
    await batch.createNamespacedJob({
      namespace: 'default',
      body: {
        metadata: {
          name: 'devop-agent-planted',
          labels,
          annotations: { [AGENT_ANNOTATIONS.owner]: 'ghost@host', [AGENT_ANNOTATIONS.agentId]: 'planted' },
        },
        spec: {
          backoffLimit: 0,
          template: {
            metadata: { labels },
            spec: {
              restartPolicy: 'Never',
              containers: [{ name: 'devop-agent', image: 'busybox', command: ['sh', '-c', 'sleep 600'] }],
            },
          },
        },
      },
    });
    // …an expired steal Lease (its holder was killed -9 a minute ago), and a live one.
    const leaseBody = (name: string, renewedAgoMs: number) => ({
      metadata: { name, labels: { [LEASE_LABEL]: LEASE_LABEL_VALUE } },
      spec: {
        holderIdentity: `${name}@host#run`,
        leaseDurationSeconds: 15,
        acquireTime: new V1MicroTime(Date.now() - renewedAgoMs),
        renewTime: new V1MicroTime(Date.now() - renewedAgoMs),
      },
    });
    await leases.createNamespacedLease({ namespace: 'default', body: leaseBody('devop-steal-stale', 60_000) });
    await leases.createNamespacedLease({ namespace: 'default', body: leaseBody('devop-steal-live', 0) });

    // When: devop clean --dry-run
    const dry = new DevopRun(['clean', '--dry-run', '--kubeconfig', cluster.kubeconfigPath]);
    expect((await dry.exited).code, dry.output).toBe(0);
    // Then: both leftovers are listed, nothing is removed, the live Lease is kept.
    expect(dry.stdout).toMatch(
      /^would remove job default\/devop-agent-planted: its target pod ghost-pod is gone \(started by ghost@host\)$/m,
    );
    expect(dry.stdout).toMatch(
      /^would remove lease default\/devop-steal-stale: expired steal lock of devop-steal-stale@host/m,
    );
    expect(dry.stdout).toMatch(/^kept lease default\/devop-steal-live: held by devop-steal-live@host/m);
    await batch.readNamespacedJob({ name: 'devop-agent-planted', namespace: 'default' });
    await leases.readNamespacedLease({ name: 'devop-steal-stale', namespace: 'default' });

    // When: devop clean
    const real = new DevopRun(['clean', '--kubeconfig', cluster.kubeconfigPath]);
    expect((await real.exited).code, real.output).toBe(0);
    expect(real.stdout).toMatch(/^removed job default\/devop-agent-planted/m);
    expect(real.stdout).toMatch(/^removed lease default\/devop-steal-stale/m);
    // Then: they are gone, the planted Job's pod too; the live Lease stays.
    await waitFor('the planted Job to be gone', async () =>
      (await batch.listNamespacedJob({ namespace: 'default' })).items.every(
        (j) => j.metadata?.name !== 'devop-agent-planted',
      ),
    );
    await waitFor(
      'its pod to be gone',
      async () =>
        (
          await env.core.listNamespacedPod({
            namespace: 'default',
            labelSelector: `${AGENT_LABELS.targetPod}=ghost-pod`,
          })
        ).items.length === 0,
    );
    const left = (await leases.listNamespacedLease({ namespace: 'default' })).items.map((l) => l.metadata?.name);
    expect(left).toContain('devop-steal-live');
    expect(left).not.toContain('devop-steal-stale');
  });
});
