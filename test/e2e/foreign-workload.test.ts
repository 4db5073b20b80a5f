// A workload devop knows nothing about: a pod of the python3 image serving `python3 -m http.server`, stolen to a local
// python server — no Node on either side, so neither the env, the preload nor the image helps devop.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import type { TargetCluster } from '../../testkit/target-cluster.js';
import {
  type DevopRun,
  devopExec,
  startE2ETarget,
  startPodClient,
  type E2ETarget,
  type PodClient,
} from '../../testkit/e2e.js';
import { waitFor } from '../../testkit/wait.js';
import { freePort } from '../../testkit/sockets.js';

requireRoot('e2e foreign workload');

/** The local python: /usr/bin/python3 (Debian's), as a user's editor would start it; the pod's PATH does not matter. */
const LOCAL_PYTHON = '/usr/bin/python3';
const POD_PORT = 8000;

describe('devop exec: a python3 http.server pod, stolen to a local python server', () => {
  let env: E2ETarget;
  let cluster: TargetCluster;
  let client: PodClient;
  let podIP = '';
  const dir = mkdtempSync(join(tmpdir(), 'devop-py-'));
  const runs: DevopRun[] = [];

  beforeAll(async () => {
    env = await startE2ETarget('e2e-foreign');
    cluster = env.cluster;
    await env.apps.createNamespacedDeployment({
      namespace: env.namespace,
      body: {
        metadata: { name: 'py' },
        spec: {
          replicas: 1,
          selector: { matchLabels: { app: 'py' } },
          template: {
            metadata: { labels: { app: 'py' } },
            spec: {
              containers: [
                {
                  name: 'web',
                  image: 'devop.test/python3',
                  command: [
                    'sh',
                    '-c',
                    `mkdir -p /srv && echo pod > /srv/who.txt && exec python3 -m http.server ${POD_PORT} --directory ` +
                      `/srv`,
                  ],
                  ports: [{ containerPort: POD_PORT }],
                  readinessProbe: { tcpSocket: { port: POD_PORT }, periodSeconds: 1 },
                },
              ],
            },
          },
        },
      },
    });
    const pod = await waitFor('a Ready pod of deployment py', async () => {
      const list = await env.core.listNamespacedPod({ namespace: env.namespace, labelSelector: 'app=py' });
      return list.items.find(
        (p) => p.status?.podIP && (p.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True'),
      );
    });
    podIP = pod.status?.podIP ?? '';
    client = await startPodClient(env);
  });

  afterAll(async () => {
    client?.close();
    await Promise.all(runs.map((r) => r.dispose()));
    await cluster?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("the local python server answers the pod's traffic while devop runs, the pod again after it stops", async () => {
    // Given the pod serves its own file
    expect((await client.get(podIP, POD_PORT, '/who.txt')).body).toBe('pod\n');
    // When devop steals its port for a python http.server on this machine, serving another file
    writeFileSync(join(dir, 'who.txt'), 'local\n');
    const local = await freePort();
    const run = devopExec(
      cluster,
      ['-t', 'deploy/py', '--steal', '-p', `${POD_PORT}:${local}`],
      [LOCAL_PYTHON, '-m', 'http.server', String(local), '--bind', '127.0.0.1', '--directory', dir],
    );
    runs.push(run);
    await run.ready();
    // Then requests to the pod IP are answered by the local server
    expect((await client.get(podIP, POD_PORT, '/who.txt')).body).toBe('local\n');
    // And after devop stops, the pod answers again
    await run.stop('SIGTERM');
    await waitFor(
      'the pod to answer again',
      async () => ((await client.get(podIP, POD_PORT, '/who.txt')).body === 'pod\n' ? true : undefined),
      5000,
    );
  });
});
