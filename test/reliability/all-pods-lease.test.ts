// Multi-pod targets and cluster-wide steal locks against the stand-in: --all-pods steals every replica (and joins a pod
// that appears after a scale-up), events name the pod each request came from; an unfiltered steal holds a Lease that
// refuses a second CLI on another pod of the same deployment, by name, until the holder dies and the Lease expires.
import { CoordinationV1Api, type V1Lease } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stealLeaseName } from '../../cli/kube/steal-lease.js';
import { requireRoot } from '../../testkit/root.js';
import {
  type DevopRun,
  LOCAL_SERVER_COMMAND,
  devopExec,
  killLocalServer,
  startE2ECluster,
  startPodClient,
  type Cluster,
  type PodClient,
} from '../../testkit/e2e.js';
import { deployReplicas, devopRules, podPid, readyPods, type Env } from './harness.js';
import { waitFor } from '../../testkit/wait.js';
import { freePort } from '../../testkit/sockets.js';

requireRoot('reliability: all pods and steal leases');

const CASE_MS = 180_000;

interface JsonEvent {
  type: string;
  level?: string;
  message?: string;
  pod?: string;
  port?: number;
  path?: string;
}

/** devop's NDJSON events (the local server's own JSON lines carry "seen", not "type"). */
function events(run: DevopRun): JsonEvent[] {
  return run.stdout
    .split('\n')
    .filter((l) => l.startsWith('{"type"'))
    .map((l) => JSON.parse(l) as JsonEvent);
}

describe('all pods and steal leases', () => {
  let cluster: Cluster;
  let env: Env;
  let client: PodClient;
  const runs: DevopRun[] = [];
  const track = (run: DevopRun): DevopRun => {
    runs.push(run);
    return run;
  };

  beforeAll(async () => {
    const e = await startE2ECluster();
    cluster = e.cluster;
    env = e;
    client = await startPodClient(e);
  });

  afterAll(async () => {
    for (const r of runs) {
      await r.stop('SIGKILL');
      killLocalServer(r);
    }
    await cluster?.stop();
  });

  it(
    '--all-pods: every replica is stolen, events name the pod, a pod added by a scale-up joins',
    async () => {
      const pods = await deployReplicas(env, 'ap', 3);
      const local = await freePort();
      const run = track(
        devopExec(
          cluster,
          ['-t', 'deploy/ap', '--steal', '--all-pods', '-p', `8080:${local}`, '--output', 'json'],
          [...LOCAL_SERVER_COMMAND],
          { env: { LOCAL_PORT: String(local) } },
        ),
      );
      await waitFor(
        () => `devop ready\n${run.output}`,
        () => events(run).some((e) => e.type === 'ready'),
      );
      // Then: the two other pods join, and requests to each pod IP reach the local command.
      for (const pod of pods) {
        const ip = pod.status?.podIP ?? '';
        await waitFor(
          () => `pod ${pod.metadata?.name} to be stolen\n${run.output}`,
          async () => (await client.who(ip, 8080, `/from-${pod.metadata?.name}`)) === 'local',
        );
      }
      const joined = events(run).filter((e) => e.type === 'log' && /^all pods: joined pod /.test(e.message ?? ''));
      expect(joined.length, run.output).toBe(2);
      // And the traffic events say which pod each request came from.
      await waitFor('traffic events for every pod', () =>
        pods.every((p) =>
          events(run).some((e) => (e.type === 'connection' || e.type === 'request') && e.pod === p.metadata?.name),
        ),
      );

      // When the deployment is scaled to 4
      const d = await env.apps.readNamespacedDeployment({ name: 'ap', namespace: 'default' });
      await env.apps.replaceNamespacedDeployment({
        name: 'ap',
        namespace: 'default',
        body: { ...d, spec: { ...d.spec!, replicas: 4 } },
      });
      const [added] = await readyPods(
        env,
        'ap',
        1,
        pods.map((p) => p.metadata?.name ?? ''),
      );
      const addedName = added.metadata?.name ?? '';
      // Then the new pod is joined and stolen too, with the same local command.
      await waitFor(
        () => `pod ${addedName} to join\n${run.output}`,
        () => events(run).some((e) => e.type === 'log' && e.message?.startsWith(`all pods: joined pod ${addedName}`)),
      );
      await waitFor(
        `pod ${addedName} to be stolen`,
        async () => (await client.who(added.status?.podIP ?? '', 8080)) === 'local',
      );
      // The local command started once (its output arrives as `output` events in JSON mode).
      expect(
        events(run).filter((e) => e.type === 'output' && (e as { text?: string }).text?.includes('"seen":"listening"'))
          .length,
      ).toBe(1);

      // When devop stops, every pod answers itself and no rule is left in any of them.
      await run.stop('SIGTERM');
      for (const pod of [...pods, added]) {
        expect(await client.who(pod.status?.podIP ?? '', 8080)).toBe(pod.metadata?.name);
        const pid = await podPid(pod);
        await waitFor(
          `no DEVOP rule in pod ${pod.metadata?.name}`,
          async () => (await devopRules(pid)).length === 0,
          30_000,
        );
      }
    },
    CASE_MS,
  );

  it(
    'a steal Lease refuses a second CLI on another pod of the deployment, by name, until the holder is killed -9 and ' +
      'it expires',
    async () => {
      const [pod1, pod2] = await deployReplicas(env, 'lk', 2);
      const [name1, name2] = [pod1.metadata?.name ?? '', pod2.metadata?.name ?? ''];
      const ip2 = pod2.status?.podIP ?? '';
      const { KubeConfig } = await import('@kubernetes/client-node');
      const kc = new KubeConfig();
      kc.loadFromFile(cluster.kubeconfigPath);
      const coordination = kc.makeApiClient(CoordinationV1Api);
      const leaseName = stealLeaseName('default', { kind: 'deployment', name: 'lk' }, 8080);
      const readLease = (): Promise<V1Lease | undefined> =>
        coordination.readNamespacedLease({ name: leaseName, namespace: 'default' }).catch(() => undefined);

      // Given CLI A steals pod 1 (unfiltered)
      const localA = await freePort();
      const a = track(
        devopExec(cluster, ['-t', `pod/${name1}`, '--steal', '-p', `8080:${localA}`], [...LOCAL_SERVER_COMMAND], {
          env: { LOCAL_PORT: String(localA) },
        }),
      );
      await a.ready();
      const held = await readLease();
      expect(held?.spec?.holderIdentity, 'A holds the Lease').toMatch(/^\S+@\S+#\S+$/);
      expect(held?.spec?.leaseDurationSeconds).toBe(15);

      // When CLI B asks for an unfiltered steal of pod 2 (another agent, same deployment)
      const localB = await freePort();
      const b = track(
        devopExec(cluster, ['-t', `pod/${name2}`, '--steal', '-p', `8080:${localB}`], [...LOCAL_SERVER_COMMAND], {
          env: { LOCAL_PORT: String(localB) },
        }),
      );
      // Then it is refused in one line naming the holder and since when; pod 2 keeps serving itself
      expect((await b.exited).code, b.output).toBe(1);
      killLocalServer(b);
      expect(b.stderr).toMatch(
        new RegExp(
          `port 8080 of deployment/lk is stolen by \\S+@\\S+ since \\d{4}-\\d\\d-\\d\\dT[\\d:.]+Z \\(Lease ` +
            `${leaseName}\\)`,
        ),
      );
      expect(await client.who(ip2, 8080)).toBe(name2);

      // While A runs, it renews the Lease (every 5 s)
      const time = (t: unknown): number => new Date(t as string).getTime();
      await waitFor(
        'A to renew the Lease',
        async () => {
          const l = await readLease();
          return l && time(l.spec?.renewTime) > time(held?.spec?.renewTime) ? true : undefined;
        },
        30_000,
      );
      // When A is killed -9 (it cannot release the Lease)
      a.child.kill('SIGKILL');
      await a.exited;
      killLocalServer(a);
      const afterKill = await readLease();
      expect(afterKill?.spec?.holderIdentity).toBe(held?.spec?.holderIdentity);
      // Then the Lease expires by itself (no renewals for leaseDurationSeconds) and B can take it over
      const renewed = time(afterKill?.spec?.renewTime);
      await waitFor('the Lease to expire', () => Date.now() > renewed + 15_000 + 500, 30_000);
      const b2 = track(
        devopExec(cluster, ['-t', `pod/${name2}`, '--steal', '-p', `8080:${localB}`], [...LOCAL_SERVER_COMMAND], {
          env: { LOCAL_PORT: String(localB) },
        }),
      );
      await b2.ready();
      expect(await client.who(ip2, 8080)).toBe('local');
      const taken = await readLease();
      expect(taken?.spec?.holderIdentity).not.toBe(held?.spec?.holderIdentity);
      expect(taken?.spec?.leaseTransitions).toBe(1);
      // And a normal exit gives the Lease back at once.
      await b2.stop('SIGTERM');
      expect(await readLease()).toBeUndefined();
    },
    CASE_MS,
  );
});
