// The agent's token end to end: it lives in a Secret owned by the agent Job (nothing secret in the Job, its pod or
// devop's output), the Secret goes with the Job, an ephemeral agent's Secret stays while that agent runs (a later
// session reuses it) and `devop clean` removes it once the agent has ended, and an agent that someone else started (or
// a pod that only carries an agent's labels) is not reused unless asked for by name.
import { randomBytes } from 'node:crypto';
import { BatchV1Api, CoreV1Api, type V1Job, type V1Secret } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clusterUser } from '../../cli/kube/agent-reuse.js';
import { agentJobName, buildAgentJob, buildAgentSecret } from '../../cli/kube/agent-manifest.js';
import { AGENT_ANNOTATIONS, AGENT_IMAGE, AGENT_LABELS, agentSecretName } from '../../shared/agent-contract.js';
import { requireRoot } from '../../testkit/root.js';
import type { TargetCluster } from '../../testkit/target-cluster.js';
import {
  DevopRun,
  LOCAL_SERVER_COMMAND,
  deployEcho,
  devopExec,
  startE2ETarget,
  startPodClient,
  type E2ETarget,
  type EchoDeployment,
  type PodClient,
} from '../../testkit/e2e.js';
import { waitFor } from '../../testkit/wait.js';
import { freePort } from '../../testkit/sockets.js';

requireRoot('e2e agent token');

/** Up to the agent's idle exit (10 s) plus the Job's ttl and the garbage collector, on a loaded machine. */
const GONE_MS = 90_000;

describe("the agent's token", () => {
  let env: E2ETarget;
  let cluster: TargetCluster;
  let client: PodClient;
  const runs: DevopRun[] = [];
  const track = (run: DevopRun): DevopRun => {
    runs.push(run);
    return run;
  };

  beforeAll(async () => {
    env = await startE2ETarget('e2e-agent-token');
    cluster = env.cluster;
    client = await startPodClient(env);
  });

  afterAll(async () => {
    client?.close();
    await Promise.all(runs.map((r) => r.dispose()));
    await cluster?.stop();
  });

  const batch = (): BatchV1Api => env.kc.makeApiClient(BatchV1Api);
  const readSecret = (name: string): Promise<V1Secret | undefined> =>
    env.core.readNamespacedSecret({ name, namespace: env.namespace }).catch((err: { code?: number }) => {
      if (err.code === 404) return undefined;
      throw err;
    });

  function steal(echo: EchoDeployment, local: number, ...flags: string[]): DevopRun {
    return track(
      devopExec(
        cluster,
        ['-t', `deploy/${echo.name}`, '--steal', '-p', `8080:${local}`, ...flags],
        [...LOCAL_SERVER_COMMAND],
        { env: { LOCAL_PORT: String(local) } },
      ),
    );
  }

  async function agentJobOf(podName: string): Promise<V1Job> {
    const { items } = await batch().listNamespacedJob({
      namespace: env.namespace,
      labelSelector: `${AGENT_LABELS.targetPod}=${podName}`,
    });
    expect(items).toHaveLength(1);
    return items[0];
  }

  it('is read from a Secret owned by the agent Job, appears in no spec or output, and goes with the Job', async () => {
    // Given a session that steals the echo pod's port (its Job ends soon after the session: --agent-ttl 0)
    const echo = await deployEcho(env, 'echo-token');
    const local = await freePort();
    const run = steal(echo, local, '--agent-ttl', '0');
    await run.ready();
    // Then the pod's traffic reaches the local command: the agent accepted the token it read from the Secret
    expect(await client.who(echo.podIP, 8080)).toBe('local');
    const job = await agentJobOf(echo.podName);
    const agentId = job.metadata?.annotations?.[AGENT_ANNOTATIONS.agentId] ?? '';
    const secret = await readSecret(agentSecretName(agentId));
    expect(secret?.metadata?.ownerReferences).toEqual([
      { apiVersion: 'batch/v1', kind: 'Job', name: agentJobName(agentId), uid: job.metadata?.uid },
    ]);
    const token = Buffer.from(secret?.data?.token ?? '', 'base64').toString('utf8');
    expect(token).toMatch(/^[0-9a-f]{48}$/);
    // And the token is nowhere in the Job, its pod or devop's output: the spec only refers to the Secret
    const { items: pods } = await env.core.listNamespacedPod({
      namespace: env.namespace,
      labelSelector: `${AGENT_LABELS.targetPod}=${echo.podName}`,
    });
    expect(pods).toHaveLength(1);
    expect(JSON.stringify(job)).not.toContain(token);
    expect(JSON.stringify(pods[0])).not.toContain(token);
    expect(run.output).not.toContain(token);
    expect(pods[0].spec?.containers[0].env).toContainEqual({
      name: 'DEVOP_AGENT_TOKEN',
      valueFrom: { secretKeyRef: { name: agentSecretName(agentId), key: 'token' } },
    });

    // When the session ends (the agent exits idle, its Job finishes and is removed)
    await run.stop();
    // Then garbage collection removes the Secret with the Job
    await waitFor(
      `the agent's Secret ${agentSecretName(agentId)} removed with its Job`,
      async () => (await readSecret(agentSecretName(agentId))) === undefined || undefined,
      GONE_MS,
    );
  });

  it('works as an ephemeral container, whose Secret (owned by the target pod) stays while it runs; clean removes it after', async () => {
    // Given a session whose agent is an ephemeral container of the target pod
    const echo = await deployEcho(env, 'echo-token-eph');
    const local = await freePort();
    const run = steal(echo, local, '--ephemeral');
    await run.ready();
    expect(await client.who(echo.podIP, 8080)).toBe('local');
    const pod = await env.core.readNamespacedPod({ name: echo.podName, namespace: env.namespace });
    const agentName = pod.spec?.ephemeralContainers?.at(-1)?.name ?? '';
    const agentId = /^devop-agent-(\w+)$/.exec(agentName)?.[1] ?? '';
    const secret = await readSecret(agentSecretName(agentId));
    expect(secret?.metadata?.ownerReferences).toEqual([
      { apiVersion: 'v1', kind: 'Pod', name: echo.podName, uid: pod.metadata?.uid },
    ]);
    // When the session ends, its Secret stays: the agent still runs (ephemeral containers cannot be removed) and a
    // later session reuses it with that token
    await run.stop();
    expect(await readSecret(agentSecretName(agentId))).toBeDefined();
    const clean = (): DevopRun => track(new DevopRun(['clean', '--kubeconfig', cluster.kubeconfigPath]));
    const early = clean();
    expect((await early.exited).code, early.output).toBe(0);
    expect(early.stdout).toMatch(new RegExp(`kept secret \\S+/${agentSecretName(agentId)}: token of a running`));
    // And once the agent has exited (idle, no session), devop clean removes the Secret
    await waitFor(
      `the ephemeral agent ${agentName} exited on idle`,
      async () => {
        const now = await env.core.readNamespacedPod({ name: echo.podName, namespace: env.namespace });
        const status = now.status?.ephemeralContainerStatuses?.find((c) => c.name === agentName);
        return status?.state?.terminated ? true : undefined;
      },
      GONE_MS,
    );
    const late = clean();
    expect((await late.exited).code, late.output).toBe(0);
    expect(late.stdout).toMatch(new RegExp(`removed secret \\S+/${agentSecretName(agentId)}: token of an ephemeral`));
    expect(await readSecret(agentSecretName(agentId))).toBeUndefined();
  }, 180_000);

  it('an agent another user started is not reused unless named with --reuse-agent', async () => {
    // Given a running agent for the pod that another user started (its Secret records them as its creator)
    const echo = await deployEcho(env, 'echo-token-foreign');
    const target = await env.core.readNamespacedPod({ name: echo.podName, namespace: env.namespace });
    const agentId = randomBytes(5).toString('hex');
    const job = buildAgentJob({
      agentId,
      namespace: env.namespace,
      image: AGENT_IMAGE,
      port: 20000 + Math.floor(Math.random() * 10000),
      target: {
        pod: echo.podName,
        uid: target.metadata?.uid ?? '',
        namespace: env.namespace,
        nodeName: target.spec?.nodeName ?? '',
        containerId: target.status?.containerStatuses?.[0]?.containerID ?? '',
        container: 'echo',
      },
      idleSeconds: 120,
      ttlSeconds: 30,
      owner: 'mallory@elsewhere',
      createdBy: 'mallory',
      flush: true,
      privileged: false,
      mirror: false,
    });
    const created = await batch().createNamespacedJob({ namespace: env.namespace, body: job });
    const owner = { apiVersion: 'batch/v1', kind: 'Job', name: agentJobName(agentId), uid: created.metadata!.uid! };
    const body = buildAgentSecret({ agentId, namespace: env.namespace, token: 'mallory', owner, createdBy: 'mallory' });
    await env.kc.makeApiClient(CoreV1Api).createNamespacedSecret({ namespace: env.namespace, body });
    await waitFor("the other user's agent running", async () => {
      const { items } = await env.core.listNamespacedPod({
        namespace: env.namespace,
        labelSelector: `${AGENT_LABELS.targetPod}=${echo.podName}`,
      });
      return items.find((p) => p.status?.containerStatuses?.[0]?.state?.running);
    });

    // When devop steals the pod's port
    const local = await freePort();
    const run = steal(echo, local);
    await run.ready();
    // Then it says why it did not reuse that agent, and starts its own
    expect(run.stderr).toContain(
      `agent ${agentJobName(agentId)} not reused: started by mallory (reuse it by name: --reuse-agent ` +
        `${agentJobName(agentId)})`,
    );
    expect(run.stderr).toMatch(/started Job devop-agent-/);
    expect(await client.who(echo.podIP, 8080)).toBe('local');
    await run.stop();

    // When devop is asked for that agent by name
    const named = steal(echo, local, '--reuse-agent', agentJobName(agentId));
    await named.ready();
    // Then it reuses it
    expect(named.stderr).toContain(`reused Job ${agentJobName(agentId)}`);
    expect(await client.who(echo.podIP, 8080)).toBe('local');
    await named.stop();
  });

  it("a pod that only carries an agent's labels is not reused, even with a Secret naming this user", async () => {
    // Given a pod labelled as the echo pod's agent, with a Secret for it that names this user (anyone who can create
    // pods and Secrets can make both), but no agent Job devop made
    const echo = await deployEcho(env, 'echo-token-forged');
    const target = await env.core.readNamespacedPod({ name: echo.podName, namespace: env.namespace });
    const agentId = 'forged';
    const forged = await env.core.createNamespacedPod({
      namespace: env.namespace,
      body: {
        metadata: {
          name: 'forged-agent',
          labels: {
            [AGENT_LABELS.name]: AGENT_LABELS.nameValue,
            [AGENT_LABELS.targetPod]: echo.podName,
            [AGENT_LABELS.targetUid]: target.metadata?.uid ?? '',
          },
          annotations: { [AGENT_ANNOTATIONS.agentId]: agentId, [AGENT_ANNOTATIONS.port]: '21111' },
        },
        spec: {
          containers: [
            {
              name: 'devop-agent',
              image: 'devop.test/shell',
              command: ['sh', '-c', 'exec sleep 100000'],
              env: [
                { name: 'DEVOP_AGENT_PORT', value: '21111' },
                {
                  name: 'DEVOP_AGENT_TOKEN',
                  valueFrom: { secretKeyRef: { name: agentSecretName(agentId), key: 'token' } },
                },
              ],
            },
          ],
        },
      },
    });
    const owner = { apiVersion: 'v1', kind: 'Pod', name: 'forged-agent', uid: forged.metadata!.uid! };
    const me = await clusterUser(env.kc);
    const body = buildAgentSecret({ agentId, namespace: env.namespace, token: 'forged', owner, createdBy: me });
    await env.core.createNamespacedSecret({ namespace: env.namespace, body });
    await waitFor('the forged agent pod running', async () => {
      const pod = await env.core.readNamespacedPod({ name: 'forged-agent', namespace: env.namespace });
      return pod.status?.containerStatuses?.[0]?.state?.running;
    });

    // When devop steals the pod's port
    const local = await freePort();
    const run = steal(echo, local);
    await run.ready();
    // Then it does not take the forged pod for an agent: it starts its own
    expect(run.stderr).toContain('agent forged-agent not reused: it is not the pod of Job devop-agent-forged');
    expect(run.stderr).toMatch(/started Job devop-agent-/);
    expect(await client.who(echo.podIP, 8080)).toBe('local');
    await run.stop();

    // When that pod's agent is asked for by name
    const named = steal(echo, local, '--reuse-agent', 'devop-agent-forged');
    await named.ready();
    // Then naming it does not make it trusted: devop says so and takes its own agent
    expect(named.stderr).toContain('agent forged-agent not reused: it is not the pod of Job devop-agent-forged');
    expect(named.stderr).toMatch(
      /--reuse-agent devop-agent-forged: no such agent runs for pod \S+; reusing devop-agent-\w+/,
    );
    expect(await client.who(echo.podIP, 8080)).toBe('local');
    await named.stop();
  });
});
