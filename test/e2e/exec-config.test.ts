// `devop exec` end to end: devop.json (flags win), rollout/ targets (Argo Rollouts CRD), targetless sessions, and what
// is left in the cluster after the last session (nothing running; finished agent Jobs removed by their TTL).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ApiextensionsV1Api, BatchV1Api, CustomObjectsApi } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import type { TargetCluster } from '../../testkit/target-cluster.js';
import {
  DevopRun,
  deployEcho,
  devopExec,
  startE2ETarget,
  type E2ETarget,
  type EchoDeployment,
} from '../../testkit/e2e.js';
import { waitFor } from '../../testkit/wait.js';

requireRoot('e2e exec config');

describe('devop exec: config, targets, cleanup', () => {
  let cluster: TargetCluster;
  let env: E2ETarget;
  const runs: DevopRun[] = [];
  const track = (run: DevopRun): DevopRun => {
    runs.push(run);
    return run;
  };
  /** Project directories the runs work in: removed in afterAll, once every run has ended. */
  const dirs: string[] = [];
  const tempDir = (): string => {
    const dir = mkdtempSync(join(tmpdir(), 'devop-e2e-config-'));
    dirs.push(dir);
    return dir;
  };
  let echo: EchoDeployment;

  beforeAll(async () => {
    env = await startE2ETarget('e2e-config');
    cluster = env.cluster;
    echo = await deployEcho(env, 'echo');
  });

  afterAll(async () => {
    await Promise.all(runs.map((r) => r.dispose()));
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
    await cluster?.stop();
  });

  it('reads ./devop.json (target, env exclude/override, agent TTL), and flags win over it', async () => {
    // Given a project directory with a devop.json and a dotenv file
    const dir = tempDir();
    writeFileSync(
      join(dir, 'devop.json'),
      JSON.stringify({
        target: 'deploy/echo',
        env: { exclude: ['SECRET_*'], override: { APP_MODE: 'from-devop-json' }, file: 'dev.env' },
        agent: { ttlSeconds: 2 },
      }),
    );
    writeFileSync(join(dir, 'dev.env'), 'EXTRA=from-env-file\nAPP_MODE=from-env-file\n');
    // When devop runs there without -t (and with a flag that adds an exclude)
    const run = track(
      new DevopRun(
        [
          'exec',
          '--kubeconfig',
          cluster.kubeconfigPath,
          '--output',
          'plain',
          '--env-exclude',
          'GREETING',
          '--',
          'sh',
          '-c',
          'echo "APP_MODE=$APP_MODE EXTRA=$EXTRA SECRET=${SECRET_TOKEN:-unset} GREETING=${GREETING:-unset} PORT=$PORT"',
        ],
        { cwd: dir },
      ),
    );
    // Then the target and the env rules come from the file (env.override wins over the env file)
    expect((await run.exited).code, run.output).toBe(0);
    expect(run.stdout).toContain('APP_MODE=from-devop-json EXTRA=from-env-file SECRET=unset GREETING=unset PORT=8080');
    expect(run.stderr).toContain(`resolve target deploy/echo: pod ${echo.podName}`);
    // And a flag wins over the file's target
    const flagged = track(
      new DevopRun(
        ['exec', '--kubeconfig', cluster.kubeconfigPath, '--output', 'plain', '-t', 'deploy/nope', '--', 'true'],
        { cwd: dir },
      ),
    );
    expect((await flagged.exited).code).toBe(1);
    expect(flagged.stderr).toContain('deployment "nope" not found');
  });

  it('names a bad devop.json key with the accepted values', async () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'devop.json'), JSON.stringify({ incoming: { mode: 'borrow' } }));
    const run = track(
      new DevopRun(
        ['exec', '--kubeconfig', cluster.kubeconfigPath, '--output', 'plain', '-t', 'deploy/echo', '--', 'true'],
        { cwd: dir },
      ),
    );
    expect((await run.exited).code).toBe(1);
    expect(run.stderr).toMatch(/devop: .*devop\.json: incoming\.mode is "borrow" — fix: accepted: "steal" \| "mirror"/);
  });

  it('resolves rollout/NAME through the Rollout selector, and says when Argo Rollouts is missing', async () => {
    const missing = track(devopExec(cluster, ['-t', 'rollout/echo-ro'], ['true']));
    expect((await missing.exited).code).toBe(1);
    expect(missing.stderr).toMatch(
      /devop: Argo Rollouts is not installed in this cluster \(no rollouts\.argoproj\.io API\) — fix: /,
    );
    // Given the Rollout CRD and a Rollout whose selector matches the echo pods
    await env.kc.makeApiClient(ApiextensionsV1Api).createCustomResourceDefinition({
      body: {
        metadata: { name: 'rollouts.argoproj.io' },
        spec: {
          group: 'argoproj.io',
          scope: 'Namespaced',
          names: { plural: 'rollouts', singular: 'rollout', kind: 'Rollout', shortNames: ['ro'] },
          versions: [
            {
              name: 'v1alpha1',
              served: true,
              storage: true,
              schema: { openAPIV3Schema: { type: 'object', x_kubernetes_preserve_unknown_fields: true } },
            },
          ],
        },
      },
    });
    const custom = env.kc.makeApiClient(CustomObjectsApi);
    await waitFor('the Rollout API to be served', async () => {
      const rollouts = { group: 'argoproj.io', version: 'v1alpha1', namespace: env.namespace, plural: 'rollouts' };
      await custom.listNamespacedCustomObject(rollouts);
      return true;
    });
    await custom.createNamespacedCustomObject({
      group: 'argoproj.io',
      version: 'v1alpha1',
      namespace: env.namespace,
      plural: 'rollouts',
      body: {
        apiVersion: 'argoproj.io/v1alpha1',
        kind: 'Rollout',
        metadata: { name: 'echo-ro' },
        spec: { selector: { matchLabels: { app: 'echo' } } },
      },
    });
    // When devop targets the Rollout
    const run = track(devopExec(cluster, ['-t', 'rollout/echo-ro'], ['sh', '-c', 'echo "APP_MODE=$APP_MODE"']));
    // Then it runs with the env of the Rollout's pod
    expect((await run.exited).code, run.output).toBe(0);
    expect(run.stdout).toContain('APP_MODE=production');
    expect(run.stderr).toContain(`resolve target rollout/echo-ro: pod ${echo.podName}`);
    const unknown = track(devopExec(cluster, ['-t', 'rollout/nope'], ['true']));
    expect((await unknown.exited).code).toBe(1);
    const notFound = `devop: rollout "nope" not found in namespace "${env.namespace}" (rollouts there: echo-ro)`;
    expect(unknown.stderr).toContain(notFound);
  });

  it('runs the agent as an ephemeral container with --ephemeral, and a later session reuses it', async () => {
    // A deployment of its own: a running Job agent on the pod would be reused (any agent serving the pod is).
    const eph = await deployEcho(env, 'echo-eph');
    const run = track(
      devopExec(cluster, ['-t', 'deploy/echo-eph', '--ephemeral'], ['sh', '-c', 'echo "APP_MODE=$APP_MODE"']),
    );
    expect((await run.exited).code, run.output).toBe(0);
    expect(run.stdout).toContain('APP_MODE=production');
    expect(run.stderr).toMatch(/started ephemeral container devop-agent-[0-9a-f]+ \(agent /);
    const pod = await env.core.readNamespacedPod({ name: eph.podName, namespace: env.namespace });
    expect(pod.spec?.ephemeralContainers?.map((c) => c.targetContainerName)).toContain('echo');
    const again = track(devopExec(cluster, ['-t', 'deploy/echo-eph', '--ephemeral'], ['true']));
    expect((await again.exited).code, again.output).toBe(0);
    expect(again.stderr).toMatch(/reused ephemeral container devop-agent-/);
  });

  it('runs targetless: a command with an agent for outgoing traffic only, and refuses -p', async () => {
    const run = track(devopExec(cluster, ['-t', 'targetless'], ['sh', '-c', 'echo targetless-ran']));
    expect((await run.exited).code, run.output).toBe(0);
    expect(run.stdout).toContain('targetless-ran');
    expect(run.stderr).toMatch(/targetless agent: started Job devop-agent-/);
    const withPort = track(devopExec(cluster, ['-t', 'targetless', '-p', '8080'], ['true']));
    expect((await withPort.exited).code).toBe(1);
    expect(withPort.stderr).toContain('devop: -p/--port needs a target');
  });

  it(
    'leaves nothing running after the last session: agents exit when idle, their Jobs finish and their TTL removes ' +
      'them',
    async () => {
      const run = track(devopExec(cluster, ['-t', 'deploy/echo', '--agent-ttl', '1'], ['true']));
      expect((await run.exited).code, run.output).toBe(0);
      const batch = env.kc.makeApiClient(BatchV1Api);
      // The agent idles out (a few seconds), its Job completes, and the TTL controller deletes it.
      await waitFor(
        'no devop agent pod or Job left',
        async () => {
          const [pods, jobs] = await Promise.all([
            env.core.listNamespacedPod({
              namespace: env.namespace,
              labelSelector: 'app.kubernetes.io/name=devop-agent',
            }),
            batch.listNamespacedJob({ namespace: env.namespace, labelSelector: 'app.kubernetes.io/name=devop-agent' }),
          ]);
          const running = pods.items.filter((p) => p.status?.phase === 'Running' || p.status?.phase === 'Pending');
          // Jobs of this suite's short-TTL sessions (ttl <= 2 s) must be gone; earlier ones may wait finished for their
          // TTL.
          const jobsLeft = jobs.items.filter(
            (j) => !(j.status?.succeeded || j.status?.failed) || (j.spec?.ttlSecondsAfterFinished ?? 0) <= 2,
          );
          return running.length === 0 && jobsLeft.length === 0 ? true : undefined;
        },
        60_000,
      );
    },
  );
});
