// `devop exec --replace` end to end on the stand-in: the Deployment goes to 0 while a copy of its pod (a waiter in
// place of its command) carries the agent and gives the local command its env; the replicas come back when devop
// stops, through the in-cluster guard when devop is killed with SIGKILL, and through `devop clean` when both are gone;
// the guard's per-session ServiceAccount, Role and RoleBinding go each time, and an object under their name that is not
// the session's is refused; a second replace of the same workload, and bad input (a pod target, targetless, a
// workload an HPA scales), are refused with one line.
import { BatchV1Api, CustomObjectsApi, RbacAuthorizationV1Api } from '@kubernetes/client-node';
import { AGENT_LABELS } from '../../shared/agent-contract.js';
import { isUserError } from '../../shared/errors.js';
import { ensureGuardAccess } from '../../cli/replace/cluster.js';
import { buildGuardAccess, buildGuardJob } from '../../cli/replace/manifest.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPLACE_ANNOTATIONS, REPLACE_LABELS, workloadApiPath } from '../../shared/replace-contract.js';
import { LEASE_DURATION_SECONDS } from '../../cli/kube/steal-lease.js';
import { requireRoot } from '../../testkit/root.js';
import { standinOnly, type TargetCluster } from '../../testkit/target-cluster.js';
import {
  DevopRun,
  LOCAL_SERVER_COMMAND,
  deployEcho,
  devopExec,
  seenRequests,
  startE2ETarget,
  startPodClient,
  type E2ETarget,
  type PodClient,
} from '../../testkit/e2e.js';
import { waitFor } from '../../testkit/wait.js';
import { freePort } from '../../testkit/sockets.js';

requireRoot('e2e replace');

/** What the spec allows after a SIGKILL: the Lease's expiry, plus 10 s for the guard to notice and restore. */
const KILL_RESTORE_MS = (LEASE_DURATION_SECONDS + 10) * 1000;
/** A local command that prints the copy's env and then waits. */
const PRINT_ENV_AND_WAIT = ['sh', '-c', 'echo "GREETING=$GREETING"; while true; do sleep 0.2; done'];

function failure(run: DevopRun): string {
  return run.stderr.trim().split('\n').slice(-1).join('\n');
}

describe('devop exec --replace', () => {
  let cluster: TargetCluster;
  let env: E2ETarget;
  let client: PodClient;
  const runs: DevopRun[] = [];
  const track = (run: DevopRun): DevopRun => {
    runs.push(run);
    return run;
  };
  const replicas = async (name: string) => {
    const d = await env.apps.readNamespacedDeployment({ name, namespace: env.namespace });
    return { spec: d.spec?.replicas, annotations: d.metadata?.annotations ?? {} };
  };
  const copies = async (name: string) =>
    (
      await env.core.listNamespacedPod({
        namespace: env.namespace,
        labelSelector: `${REPLACE_LABELS.of}=${name},${REPLACE_LABELS.role}=copy`,
      })
    ).items.filter((p) => !p.metadata?.deletionTimestamp);
  const guards = async (name: string) =>
    (
      await env.kc.makeApiClient(BatchV1Api).listNamespacedJob({
        namespace: env.namespace,
        labelSelector: `${REPLACE_LABELS.of}=${name},${REPLACE_LABELS.role}=guard`,
      })
    ).items.filter((j) => !j.metadata?.deletionTimestamp);

  /** Every ServiceAccount, Role and RoleBinding with devop's label in the namespace, as `kind/name`. */
  const guardAccess = async () => {
    const rbac = env.kc.makeApiClient(RbacAuthorizationV1Api);
    const request = {
      namespace: env.namespace,
      labelSelector: `${AGENT_LABELS.managedBy}=${AGENT_LABELS.managedByValue}`,
    };
    const [accounts, roles, bindings] = await Promise.all([
      env.core.listNamespacedServiceAccount(request),
      rbac.listNamespacedRole(request),
      rbac.listNamespacedRoleBinding(request),
    ]);
    return [
      ...accounts.items.map((o) => `serviceaccount/${o.metadata?.name}`),
      ...roles.items.map((o) => `role/${o.metadata?.name}`),
      ...bindings.items.map((o) => `rolebinding/${o.metadata?.name}`),
    ];
  };

  beforeAll(async () => {
    env = await startE2ETarget('e2e-replace');
    cluster = env.cluster;
    [, client] = await Promise.all([deployEcho(env, 'echo'), startPodClient(env)]);
  }, 120_000);

  afterAll(async () => {
    await Promise.all(runs.map((r) => r.dispose()));
    client?.close();
    await cluster?.stop();
  });

  it('scales the Deployment to 0, runs on the copy, refuses a second replace, restores when devop stops', async () => {
    // When devop replaces deploy/echo
    const run = track(devopExec(cluster, ['-t', 'deploy/echo', '--replace'], PRINT_ENV_AND_WAIT));
    await run.ready(120_000);
    // Then the Deployment is at 0 with its count recorded, and the local command has the copy's env (a ConfigMap ref)
    const during = await replicas('echo');
    expect(during.spec).toBe(0);
    expect(during.annotations[REPLACE_ANNOTATIONS.replicas]).toBe('1');
    await waitFor('the env line', () =>
      run.stdout.includes("GREETING=hello from echo's configmap") ? true : undefined,
    );
    expect(run.stderr).toMatch(/replace deployment\/echo.*scaled to 0 \(was 1\)/);
    const [copy] = await copies('echo');
    expect(copy?.metadata?.labels?.app, 'without --steal the copy has none of the workload labels').toBeUndefined();
    // And the guard runs as an account of its own whose Role names each object it may touch
    const [guardJob] = await guards('echo');
    const session = guardJob.metadata!.name!;
    expect((await guardAccess()).sort()).toEqual([
      `role/${session}`,
      `rolebinding/${session}`,
      `serviceaccount/${session}`,
    ]);
    const role = await env.kc
      .makeApiClient(RbacAuthorizationV1Api)
      .readNamespacedRole({ name: session, namespace: env.namespace });
    expect(role.rules?.map((r) => r.resourceNames)).toEqual([
      ['echo'],
      [copy.metadata!.name!],
      [expect.stringMatching(/^devop-replace-deployment-echo-/)],
      [session],
    ]);
    await waitFor('the original pod to go', async () =>
      (await env.core.listNamespacedPod({ namespace: env.namespace, labelSelector: 'app=echo' })).items.length === 0
        ? true
        : undefined,
    );

    // And a second replace of the same workload is refused, naming the holder
    const second = track(devopExec(cluster, ['-t', 'deploy/echo', '--replace'], ['true']));
    expect((await second.exited).code, second.output).toBe(1);
    expect(failure(second)).toMatch(/^devop: deployment\/echo is already replaced by \S+@\S+ since .* — fix: wait/);

    // When devop stops
    expect((await run.stop('SIGINT')).code, run.output).toBe(0); // a stop asked by the user is a normal exit
    // Then the replicas are back and the copy, the guard and the annotations are gone
    const after = await replicas('echo');
    expect(after.spec).toBe(1);
    expect(after.annotations[REPLACE_ANNOTATIONS.replicas]).toBeUndefined();
    expect(await copies('echo')).toEqual([]);
    expect(await guards('echo')).toEqual([]);
    // And no guard ServiceAccount, Role or RoleBinding is left
    expect(await guardAccess()).toEqual([]);
  }, 240_000);

  it('kill -9 of devop: the guard restores the replicas within Lease expiry + 10 s, the copy goes', async () => {
    await waitFor(
      'a Ready pod of echo again',
      async () => {
        const pods = await env.core.listNamespacedPod({ namespace: env.namespace, labelSelector: 'app=echo' });
        return pods.items.some((p) => p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'))
          ? true
          : undefined;
      },
      120_000,
    );
    // Given a replace with --steal: the copy keeps the workload's labels and its port goes to the local server
    const local = await freePort();
    const run = track(
      devopExec(
        cluster,
        ['-t', 'deploy/echo', '--replace', '--steal', '-p', `8080:${local}`],
        [...LOCAL_SERVER_COMMAND],
        {
          env: { LOCAL_PORT: String(local) },
        },
      ),
    );
    await run.ready(120_000);
    const [copy] = await copies('echo');
    expect(copy.metadata?.labels?.app).toBe('echo');
    expect((await replicas('echo')).spec).toBe(0);
    expect(await client.who(copy.status!.podIP!, 8080, '/to-the-copy')).toBe('local');
    expect(seenRequests(run).map((r) => r.path)).toContain('/to-the-copy');
    // When devop is killed with SIGKILL (its local command with it: it runs in devop's process group's care)
    run.child.kill('SIGKILL');
    await run.exited;
    const killedAt = Date.now();
    // Then the guard restores the count and removes the copy and itself
    await waitFor(
      'the replicas back to 1',
      async () => ((await replicas('echo')).spec === 1 ? true : undefined),
      KILL_RESTORE_MS,
    );
    const restoredMs = Date.now() - killedAt;
    expect(restoredMs).toBeLessThanOrEqual(KILL_RESTORE_MS);
    await waitFor('the copy pod gone', async () => ((await copies('echo')).length === 0 ? true : undefined), 10_000);
    expect((await replicas('echo')).annotations[REPLACE_ANNOTATIONS.replicas]).toBeUndefined();
    await waitFor('the guard Job gone', async () => ((await guards('echo')).length === 0 ? true : undefined), 10_000);
    // And its ServiceAccount, Role and RoleBinding go with it (owned by the Job: garbage collection)
    await waitFor('no guard account left', async () => ((await guardAccess()).length === 0 ? true : undefined), 10_000);
    console.log(`replicas restored ${restoredMs} ms after SIGKILL (Lease ${LEASE_DURATION_SECONDS} s)`);
  }, 240_000);

  it('devop clean restores the replicas when devop and its guard are both gone', async () => {
    await waitFor(
      'the replicas of echo at 1',
      async () => ((await replicas('echo')).spec === 1 ? true : undefined),
      KILL_RESTORE_MS,
    );
    // Given a replace whose devop is killed and whose guard Job is deleted before it could restore
    const run = track(devopExec(cluster, ['-t', 'deploy/echo', '--replace'], PRINT_ENV_AND_WAIT));
    await run.ready(120_000);
    run.child.kill('SIGKILL');
    await run.exited;
    const [guard] = await guards('echo');
    await env.kc
      .makeApiClient(BatchV1Api)
      .deleteNamespacedJob({ name: guard.metadata!.name!, namespace: env.namespace, propagationPolicy: 'Background' });
    await waitFor('the guard pod gone', async () => {
      const pods = await env.core.listNamespacedPod({
        namespace: env.namespace,
        labelSelector: `${REPLACE_LABELS.role}=guard`,
      });
      return pods.items.length === 0 ? true : undefined;
    });
    expect((await replicas('echo')).spec).toBe(0);

    // When devop clean runs while the Lease is still live: the workload is kept as it is
    const early = track(new DevopRun(['clean', '--kubeconfig', cluster.kubeconfigPath]));
    expect((await early.exited).code, early.output).toBe(0);
    expect(early.stdout).toMatch(/kept deployment \S+\/echo: replaced by \S+ \(a session is live\)/);
    // And once the Lease has expired, with a guard account left behind (an orphaning delete, or a cluster that does not
    // collect garbage), devop clean restores the recorded count and removes the copy and the account
    await new Promise((r) => setTimeout(r, (LEASE_DURATION_SECONDS + 1) * 1000));
    const planted = buildGuardAccess({
      name: 'devop-replace-guard-left',
      namespace: env.namespace,
      session: 'left',
      workload: { group: 'apps', resource: 'deployments', name: 'echo' },
      copyPod: 'echo-devop-replace-left',
      lease: 'devop-replace-deployment-echo-left',
      jobUid: 'a-guard-job-long-gone',
    });
    const withoutOwner = <T extends { metadata?: object }>(o: T): T => ({
      ...o,
      metadata: { ...o.metadata, ownerReferences: undefined },
    });
    const rbac = env.kc.makeApiClient(RbacAuthorizationV1Api);
    await env.core.createNamespacedServiceAccount({ namespace: env.namespace, body: withoutOwner(planted.account) });
    await rbac.createNamespacedRole({ namespace: env.namespace, body: withoutOwner(planted.role) });
    await rbac.createNamespacedRoleBinding({ namespace: env.namespace, body: withoutOwner(planted.binding) });
    expect(await guardAccess()).toEqual(
      expect.arrayContaining(['serviceaccount', 'role', 'rolebinding'].map((k) => `${k}/devop-replace-guard-left`)),
    );
    const clean = track(new DevopRun(['clean', '--kubeconfig', cluster.kubeconfigPath]));
    expect((await clean.exited).code, clean.output).toBe(0);
    expect(clean.stdout).toMatch(
      /restored deployment \S+\/echo: replaced by \S+, whose session ended: back to 1 replicas/,
    );
    expect((await replicas('echo')).spec).toBe(1);
    expect((await replicas('echo')).annotations[REPLACE_ANNOTATIONS.replicas]).toBeUndefined();
    await waitFor('the copy pod gone', async () => ((await copies('echo')).length === 0 ? true : undefined), 10_000);
    expect(clean.stdout).toMatch(/removed role \S+\/devop-replace-guard-left: replace guard's account of echo/);
    expect(await guardAccess()).toEqual([]);
  }, 240_000);

  it("refuses a Role already under the guard's name that is not the session's, and leaves it alone", async () => {
    // Given a session's guard Job (suspended, as devop creates it) and someone's Role under the name its guard account
    // will have, with wider rules
    const rbac = env.kc.makeApiClient(RbacAuthorizationV1Api);
    const batch = env.kc.makeApiClient(BatchV1Api);
    const name = 'devop-replace-guard-race';
    const job = await batch.createNamespacedJob({
      namespace: env.namespace,
      body: buildGuardJob({
        name,
        namespace: env.namespace,
        workload: { kind: 'deployment', name: 'echo', path: workloadApiPath('deployment', env.namespace, 'echo') },
        lease: 'devop-replace-deployment-echo-race',
        holder: 'ada@laptop#race',
        copyPod: 'echo-devop-replace-race',
        agentImage: 'devop-agent:never-started',
        owner: 'ada@laptop',
      }),
    });
    const access = buildGuardAccess({
      name,
      namespace: env.namespace,
      session: 'race',
      workload: { group: 'apps', resource: 'deployments', name: 'echo' },
      copyPod: 'echo-devop-replace-race',
      lease: 'devop-replace-deployment-echo-race',
      jobUid: job.metadata!.uid!,
    });
    const foreign = {
      ...access.role,
      metadata: { ...access.role.metadata, ownerReferences: undefined },
      rules: [{ apiGroups: ['*'], resources: ['*'], verbs: ['*'] }],
    };
    await rbac.createNamespacedRole({ namespace: env.namespace, body: foreign });
    // When the session creates its guard account
    const ours: string[] = [];
    const refused = await ensureGuardAccess(env.kc, env.namespace, access, (o) => ours.push(o.kind)).then(
      () => undefined,
      (err: unknown) => err,
    );
    // Then it is refused in one line that names `devop clean`, and the foreign Role is neither used nor deleted
    expect(isUserError(refused), String(refused)).toBe(true);
    expect(String((refused as Error).message)).toMatch(
      /Role \S+\/devop-replace-guard-race is already there and is not/,
    );
    expect(String((refused as { hint?: string }).hint)).toMatch(/devop clean/);
    expect(ours).toEqual(['ServiceAccount']);
    const still = await rbac.readNamespacedRole({ name, namespace: env.namespace });
    expect(still.rules?.[0].verbs).toEqual(['*']);
    // And the session's own objects found again (a retried create) are used
    await rbac.deleteNamespacedRole({ name, namespace: env.namespace });
    await ensureGuardAccess(env.kc, env.namespace, access, () => undefined);
    const again: string[] = [];
    await ensureGuardAccess(env.kc, env.namespace, access, (o) => again.push(o.kind));
    expect(again).toEqual(['ServiceAccount', 'Role', 'RoleBinding']);
    // And deleting the guard Job removes all three (garbage collection)
    await batch.deleteNamespacedJob({ name, namespace: env.namespace, propagationPolicy: 'Background' });
    await waitFor('no guard account left', async () => ((await guardAccess()).length === 0 ? true : undefined), 10_000);
  }, 60_000);

  it('bad input: a pod target, targetless, an APIService, or a workload scaled by an HPA — one line each', async () => {
    const pod = track(devopExec(cluster, ['-t', 'pod/some-pod', '--replace'], ['true']));
    expect((await pod.exited).code, pod.output).toBe(1);
    expect(failure(pod)).toMatch(/^devop: --replace works on a deploy\/sts\/rollout, not on pod\/some-pod.* — fix: /);

    const targetless = track(devopExec(cluster, ['-t', 'targetless', '--replace'], ['true']));
    expect((await targetless.exited).code, targetless.output).toBe(1);
    expect(failure(targetless)).toMatch(/^devop: --replace needs a workload to replace.* — fix: /);

    const extension = track(devopExec(cluster, ['-t', 'apiservice/v1.example.com', '--replace'], ['true']));
    expect((await extension.exited).code, extension.output).toBe(1);
    expect(failure(extension)).toMatch(
      /^devop: --replace works on a deploy\/sts\/rollout, not on apiservice\/.* — fix: /,
    );

    // Given an HPA on deploy/echo
    await env.kc.makeApiClient(CustomObjectsApi).createNamespacedCustomObject({
      group: 'autoscaling',
      version: 'v2',
      plural: 'horizontalpodautoscalers',
      namespace: env.namespace,
      body: {
        apiVersion: 'autoscaling/v2',
        kind: 'HorizontalPodAutoscaler',
        metadata: { name: 'echo-hpa' },
        spec: { scaleTargetRef: { apiVersion: 'apps/v1', kind: 'Deployment', name: 'echo' }, maxReplicas: 3 },
      },
    });
    const hpa = track(devopExec(cluster, ['-t', 'deploy/echo', '--replace'], ['true']));
    expect((await hpa.exited).code, hpa.output).toBe(1);
    expect(failure(hpa)).toMatch(
      /^devop: deployment\/echo is scaled by the HorizontalPodAutoscaler "echo-hpa".* — fix: /,
    );
    // And nothing was scaled
    expect((await replicas('echo')).spec).toBe(1);
  }, 120_000);

  standinOnly("the restricted user is the stand-in's")(
    'a user who may not scale the workload or start the guard is told what is missing, before anything changes',
    async () => {
      const restricted = cluster.standin!.restrictedKubeconfigPath;
      const run = track(devopExec(cluster, ['-t', 'deploy/echo', '--replace'], ['true'], { kubeconfig: restricted }));
      expect((await run.exited).code, run.output).toBe(1);
      expect(failure(run)).toMatch(
        /^devop: RBAC: devop-restricted may not get deployments\.apps, patch deployments\.apps, /,
      );
      expect(failure(run)).toMatch(/, create roles\.rbac\.authorization\.k8s\.io, .* — fix: /);
      expect((await replicas('echo')).spec).toBe(1);
    },
  );
});
