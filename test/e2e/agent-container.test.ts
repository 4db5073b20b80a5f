// The agent as it ships: a session's agent is the real image in a real container, with exactly the capabilities the
// manifest asks for; an agent whose container lost one (a policy removed it) makes the feature that needs it fail with
// one line naming it.
import { existsSync, readFileSync, readlinkSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { BatchV1Api, CoreV1Api, type V1Container, type V1Pod, type V1PodSpec } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CAPABILITY_BITS } from '../../agent/capabilities.js';
import {
  agentJobName,
  buildAgentEphemeralContainer,
  buildAgentJob,
  buildAgentSecret,
  type AgentSpecInput,
} from '../../cli/kube/agent-manifest.js';
import { AGENT_BUNDLE_PATH, AGENT_IMAGE, AGENT_LABELS, agentCapabilities } from '../../shared/agent-contract.js';
import { pidsOfContainer } from '../../testkit/pods.js';
import { requireRoot } from '../../testkit/root.js';
import { standinOnly, type TargetCluster } from '../../testkit/target-cluster.js';
import {
  type DevopRun,
  LOCAL_SERVER_COMMAND,
  deployEcho,
  devopExec,
  startE2ETarget,
  startPodClient,
  type E2ETarget,
  type PodClient,
} from '../../testkit/e2e.js';
import { waitFor } from '../../testkit/wait.js';
import { freePort } from '../../testkit/sockets.js';

requireRoot('e2e agent container');

/** The CapEff mask of exactly the capabilities of a job-mode agent that steals (no NET_RAW: it does not mirror). */
function agentCapabilityMask(): bigint {
  return agentCapabilities('job', false).reduce((mask, cap) => mask | (1n << BigInt(CAPABILITY_BITS[cap])), 0n);
}

function capEff(pid: number): bigint {
  const hex = /^CapEff:\s*([0-9a-f]+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? '0';
  return BigInt(`0x${hex}`);
}

async function agentPodOf(env: E2ETarget, targetPod: string): Promise<V1Pod> {
  return waitFor(`the running agent pod of ${targetPod}`, async () => {
    const { items } = await env.core.listNamespacedPod({
      namespace: env.namespace,
      labelSelector: `${AGENT_LABELS.targetPod}=${targetPod}`,
    });
    return items.find(
      (p) => p.status?.containerStatuses?.[0]?.state?.running && p.status.containerStatuses[0].containerID,
    );
  });
}

describe('the agent in its real container', () => {
  let env: E2ETarget;
  let cluster: TargetCluster;
  let client: PodClient;
  const runs: DevopRun[] = [];
  const track = (run: DevopRun): DevopRun => {
    runs.push(run);
    return run;
  };

  beforeAll(async () => {
    env = await startE2ETarget('e2e-agent-container');
    cluster = env.cluster;
    client = await startPodClient(env);
  });

  afterAll(async () => {
    client?.close();
    await Promise.all(runs.map((r) => r.dispose()));
    await cluster?.stop();
  });

  // Reading the agent's /proc entries takes the node's view: only the stand-in's test machine is the node.
  const onStandin = standinOnly("the test machine is the stand-in's node: it reads the agent container's /proc");

  onStandin(
    "runs from the image: its own mount namespace and root, one resident process, exactly the manifest's capabilities",
    async () => {
      // Given a session stealing the echo pod's port (a job-mode agent)
      const echo = await deployEcho(env, 'echo-caps');
      const local = await freePort();
      const run = track(
        devopExec(cluster, ['-t', 'deploy/echo-caps', '--steal', '-p', `8080:${local}`], [...LOCAL_SERVER_COMMAND], {
          env: { LOCAL_PORT: String(local) },
        }),
      );
      await run.ready();
      expect(await client.who(echo.podIP, 8080)).toBe('local');
      // Then the agent is the container of the image
      const agentPod = await agentPodOf(env, echo.podName);
      expect(agentPod.status?.containerStatuses?.[0]?.image).toBe(AGENT_IMAGE);
      const pids = await pidsOfContainer(agentPod.status?.containerStatuses?.[0]?.containerID ?? '');
      // By program: the main thread's name (comm) is MainThread from Node 24 on.
      const nodes = pids.filter((pid) => readlinkSync(`/proc/${pid}/exe`).endsWith('/node'));
      // One Node process: the entry point execs the agent inside the target's netns (no parent left to forward signals)
      expect(nodes).toHaveLength(1);
      const [agent] = nodes;
      expect(readlinkSync(`/proc/${agent}/ns/mnt`)).not.toBe(readlinkSync('/proc/self/ns/mnt'));
      expect(existsSync(`/proc/${agent}/root${AGENT_BUNDLE_PATH}`)).toBe(true);
      expect(existsSync(AGENT_BUNDLE_PATH)).toBe(false);
      // In the target pod's network namespace, not its own pod's
      const target = await pidsOfContainer(echo.pod.status?.containerStatuses?.[0]?.containerID ?? '');
      expect(readlinkSync(`/proc/${agent}/ns/net`)).toBe(readlinkSync(`/proc/${target[0]}/ns/net`));
      // With exactly the capabilities the manifest asks for: nothing of the runtime's default set on top
      expect(capEff(agent).toString(16)).toBe(agentCapabilityMask().toString(16));
      await run.stop();
    },
  );

  it("the agent's read-only root leaves iptables' legacy backend its lock file, in job and ephemeral mode", async () => {
    // Given the agent's container as the manifests build it for a mirroring session (its command replaced by a call of
    // the legacy iptables, which opens /run/xtables.lock, or XTABLES_LOCKFILE, for writing before anything else; it
    // needs NET_RAW too, for libiptc's raw socket, which only a mirroring session's agent has), with no token env
    const input: AgentSpecInput = {
      agentId: 'rootfs',
      namespace: env.namespace,
      image: AGENT_IMAGE,
      port: 21000,
      target: { pod: 'p', uid: 'u', namespace: env.namespace, nodeName: '', containerId: 'c', container: 'c' },
      idleSeconds: 10,
      ttlSeconds: 30,
      owner: 'test',
      createdBy: 'test',
      flush: true,
      privileged: false,
      mirror: true,
    };
    const probe = ['/bin/sh', '-c', 'iptables-legacy -S >/dev/null && echo lock-ok'];
    const jobSpec = buildAgentJob(input).spec!.template.spec!;
    const ephemeral = buildAgentEphemeralContainer(input);
    const lockEnv = (ephemeral.env ?? []).filter((e) => e.name === 'XTABLES_LOCKFILE');
    const asRegular = (env: V1Container['env']): V1Container => ({
      name: 'agent',
      image: AGENT_IMAGE,
      command: probe,
      env,
      securityContext: ephemeral.securityContext,
    });
    const pods: Record<string, V1PodSpec> = {
      'rootfs-job': { volumes: jobSpec.volumes, containers: [{ ...jobSpec.containers[0], command: probe, env: [] }] },
      'rootfs-ephemeral': { containers: [asRegular(lockEnv)] },
      // Without the lock file's place: what the two above are there for
      'rootfs-bare': { containers: [asRegular([])] },
    };
    // When each runs
    for (const [name, spec] of Object.entries(pods))
      await env.core.createNamespacedPod({
        namespace: env.namespace,
        body: { metadata: { name }, spec: { ...spec, restartPolicy: 'Never' } },
      });
    const logOf = (name: string): Promise<string> =>
      waitFor(`pod ${name} to finish`, async () => {
        const pod = await env.core.readNamespacedPod({ name, namespace: env.namespace });
        if (pod.status?.phase !== 'Succeeded' && pod.status?.phase !== 'Failed') return undefined;
        return String(await env.core.readNamespacedPodLog({ name, namespace: env.namespace }));
      });
    // Then iptables takes its lock in both modes; on the bare read-only root it cannot
    expect(await logOf('rootfs-job')).toContain('lock-ok');
    expect(await logOf('rootfs-ephemeral')).toContain('lock-ok');
    expect(await logOf('rootfs-bare')).toContain("can't open lock file /run/xtables.lock: Read-only file system");
  });

  it('an agent whose container lost NET_ADMIN: stealing fails with one line naming it', async () => {
    // Given an agent for the pod that a policy started without NET_ADMIN (devop reuses a running agent of the pod)
    const echo = await deployEcho(env, 'echo-nocap');
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
      idleSeconds: 60,
      ttlSeconds: 30,
      owner: 'policy@test',
      createdBy: 'policy',
      flush: true,
      privileged: false,
      mirror: false,
    });
    const context = job.spec!.template.spec!.containers[0].securityContext!;
    context.capabilities!.add = context.capabilities!.add!.filter((c) => c !== 'NET_ADMIN');
    const created = await env.kc.makeApiClient(BatchV1Api).createNamespacedJob({ namespace: env.namespace, body: job });
    const owner = { apiVersion: 'batch/v1', kind: 'Job', name: agentJobName(agentId), uid: created.metadata!.uid! };
    const secret = buildAgentSecret({ agentId, namespace: env.namespace, token: 'tok', owner, createdBy: 'policy' });
    await env.kc.makeApiClient(CoreV1Api).createNamespacedSecret({ namespace: env.namespace, body: secret });
    await agentPodOf(env, echo.podName);
    // When devop is asked to steal its port (that agent named: another user started it)
    const local = await freePort();
    const run = track(
      devopExec(
        cluster,
        ['-t', 'deploy/echo-nocap', '--steal', '-p', `8080:${local}`, '--reuse-agent', agentJobName(agentId)],
        [...LOCAL_SERVER_COMMAND],
        { env: { LOCAL_PORT: String(local) } },
      ),
    );
    const exit = await run.exited;
    // Then it fails with one line that names the capability and the fix; the pod still answers its own traffic
    expect(exit.code).not.toBe(0);
    expect(run.stderr).toMatch(/reused/);
    const last = run.stderr.trim().split('\n').at(-1);
    const refused =
      "^devop: port 8080 of pod echo-nocap-\\S+ cannot be stolen: the agent's container lacks CAP_NET_ADMIN, " +
      "which stealing :8080 needs — fix: allow NET_ADMIN in the agent's securityContext";
    expect(last).toMatch(new RegExp(refused));
    expect(await client.who(echo.podIP, 8080)).toBe(echo.podName);
  });
});
