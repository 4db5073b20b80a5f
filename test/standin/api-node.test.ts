// client-node 1.4 against the stand-in with its kubelet: a Deployment's pods become Ready, PortForward reaches a pod
// process that listens only on 127.0.0.1 (10 MiB byte-exact), Exec returns stdout and the exit status.
import { createHash, randomBytes } from 'node:crypto';
import { PassThrough, Writable } from 'node:stream';
import { AppsV1Api, CoreV1Api, Exec, KubeConfig, PortForward, type V1Status } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { waitFor } from '../../testkit/wait.js';

const LOOPBACK_ECHO =
  `require('net').createServer((s) => s.pipe(s)).listen(7000, '127.0.0.1', () => ` +
  `console.log('echo on 127.0.0.1:7000'))`;
/** Pods start as real processes on a shared, loaded machine: give each step room. */
const SYSTEM_TEST_TIMEOUT_MS = 180_000;
const run = requireRoot('stand-in cluster: client-node with the kubelet');
let cluster: ClusterHandle;
let kc: KubeConfig;
let podName: string;

beforeAll(async () => {
  if (!run) return;
  cluster = await startCluster();
  kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfigPath);
});

afterAll(async () => {
  await cluster?.stop();
});

describe.runIf(run)('client-node with the kubelet', () => {
  it(
    'creates a Deployment whose pods become Ready',
    async () => {
      const apps = kc.makeApiClient(AppsV1Api);
      const core = kc.makeApiClient(CoreV1Api);
      await apps.createNamespacedDeployment({
        namespace: 'default',
        body: {
          metadata: { name: 'loop' },
          spec: {
            replicas: 2,
            selector: { matchLabels: { app: 'loop' } },
            template: {
              metadata: { labels: { app: 'loop' } },
              spec: {
                containers: [
                  {
                    name: 'echo',
                    image: 'devop.test/shell',
                    command: ['node', '-e', LOOPBACK_ECHO],
                    readinessProbe: {
                      exec: {
                        command: [
                          'node',
                          '-e',
                          "require('net').connect(7000, '127.0.0.1').on('connect', () => " +
                            "process.exit(0)).on('error', () => process.exit(1))",
                        ],
                      },
                      periodSeconds: 1,
                    },
                  },
                ],
              },
            },
          },
        },
      });
      const d = await waitFor(
        '2 available replicas',
        async () => {
          const x = await apps.readNamespacedDeployment({ name: 'loop', namespace: 'default' });
          return x.status?.availableReplicas === 2 && x.status.readyReplicas === 2 ? x : undefined;
        },
        60_000,
      );
      expect(d.status?.conditions?.find((c) => c.type === 'Available')?.status).toBe('True');
      const pods = (await core.listNamespacedPod({ namespace: 'default', labelSelector: 'app=loop' })).items;
      expect(pods).toHaveLength(2);
      for (const p of pods) {
        expect(p.status?.phase).toBe('Running');
        expect(p.status?.podIP).toMatch(/^10\./);
        expect(p.status?.containerStatuses?.[0].containerID).toMatch(/^containerd:\/\/[0-9a-f]{64}$/);
      }
      podName = pods[0].metadata!.name!;
    },
    SYSTEM_TEST_TIMEOUT_MS,
  );

  it(
    'port-forwards 10 MiB byte-exact to a process listening only on 127.0.0.1 in the pod',
    async () => {
      const payload = randomBytes(10 * 1024 * 1024);
      const input = new PassThrough();
      const received: Buffer[] = [];
      let got = 0;
      const output = new Writable({
        write(chunk, _e, cb) {
          received.push(chunk);
          got += chunk.length;
          cb();
        },
      });
      const ws: any = await new PortForward(kc).portForward('default', podName, [7000], output, null, input);
      for (let i = 0; i < payload.length; i += 64 * 1024) input.write(payload.subarray(i, i + 64 * 1024));
      await waitFor('10 MiB echoed', () => got >= payload.length, 90_000);
      expect(got).toBe(payload.length);
      expect(createHash('sha256').update(Buffer.concat(received)).digest('hex')).toBe(
        createHash('sha256').update(payload).digest('hex'),
      );
      ws.close();
    },
    SYSTEM_TEST_TIMEOUT_MS,
  );

  it(
    'execs a command in the container and reads stdout and the exit status',
    async () => {
      const out: Buffer[] = [];
      let status: V1Status | undefined;
      await new Exec(kc).exec(
        'default',
        podName,
        'echo',
        ['sh', '-c', 'echo "pod=$HOSTNAME"; exit 4'],
        new Writable({
          write: (c, _e, cb) => {
            out.push(c);
            cb();
          },
        }),
        new PassThrough(),
        null,
        false,
        (s) => (status = s),
      );
      await waitFor('exec status', () => status);
      expect(Buffer.concat(out).toString()).toBe(`pod=${podName}\n`);
      expect(status).toMatchObject({
        status: 'Failure',
        reason: 'NonZeroExitCode',
        details: { causes: [{ reason: 'ExitCode', message: '4' }] },
      });
    },
    SYSTEM_TEST_TIMEOUT_MS,
  );
});
