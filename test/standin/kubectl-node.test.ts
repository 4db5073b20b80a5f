// kubectl 1.27, 1.30 and 1.33 against the stand-in with its kubelet: logs, exec (plain SPDY on 1.27, WebSocket on the
// others), port-forward, debug with an ephemeral container, and delete of a Deployment cascading to pods that really
// stop.
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { AppsV1Api, CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { waitFor } from '../../testkit/wait.js';

const runFile = promisify(execFile);
/** Pods start as real processes on a shared, loaded machine: give each version's round room. */
const SYSTEM_TEST_TIMEOUT_MS = 180_000;
const run = requireRoot('stand-in cluster: kubectl with the kubelet');
let cluster: ClusterHandle;
let kc: KubeConfig;
let dir: string;

async function kubectl(v: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const r = await runFile(`/usr/lib/google-cloud-sdk/bin/kubectl.${v}`, args, {
      env: { ...process.env, KUBECONFIG: cluster.kubeconfigPath, HOME: dir },
      timeout: 60_000,
    });
    return { code: 0, ...r };
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof err.code === 'number' ? err.code : -1, stdout: err.stdout ?? '', stderr: err.stderr ?? '' };
  }
}

/** `kubectl port-forward pod/POD :PORT`: the local port it prints and a stop, or its output if it says nothing. */
async function portForward(v: string, pod: string, port: number): Promise<{ local: number; stop: () => void }> {
  const child = spawn(`/usr/lib/google-cloud-sdk/bin/kubectl.${v}`, ['port-forward', `pod/${pod}`, `:${port}`], {
    env: { ...process.env, KUBECONFIG: cluster.kubeconfigPath, HOME: dir },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const local = await waitFor(
    () => `kubectl ${v} port-forward to say where it listens (it said: ${output})`,
    () => {
      const found = /Forwarding from 127\.0\.0\.1:(\d+)/.exec(output)?.[1];
      return found ? Number(found) : undefined;
    },
  ).catch((e) => {
    child.kill('SIGKILL');
    throw e;
  });
  return { local, stop: () => child.kill('SIGKILL') };
}

beforeAll(async () => {
  if (!run) return;
  dir = mkdtempSync(join(tmpdir(), 'devop-kubectl-node-'));
  cluster = await startCluster();
  kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfigPath);
});

afterAll(async () => {
  await cluster?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe.runIf(run)('kubectl with the kubelet', () => {
  // The long round on the oldest kubectl (exec over plain SPDY), the first whose exec is a WebSocket, and the newest
  for (const v of ['1.27', '1.30', '1.33']) {
    it(
      `kubectl ${v}: logs, exec, port-forward, debug --target, delete deploy cascading`,
      async () => {
        const name = `web${v.replace('.', '')}`;
        const apps = kc.makeApiClient(AppsV1Api);
        const core = kc.makeApiClient(CoreV1Api);
        await apps.createNamespacedDeployment({
          namespace: 'default',
          body: {
            metadata: { name },
            spec: {
              replicas: 1,
              selector: { matchLabels: { app: name } },
              template: {
                metadata: { labels: { app: name } },
                spec: {
                  terminationGracePeriodSeconds: 5,
                  containers: [
                    {
                      name: 'web',
                      image: 'devop.test/http-echo',
                      env: [
                        { name: 'PORT', value: '8080' },
                        { name: 'MARK', value: `mark-${v}` },
                      ],
                    },
                  ],
                },
              },
            },
          },
        });
        const rollout = await kubectl(v, ['rollout', 'status', `deployment/${name}`, '--timeout=90s']);
        expect(rollout.stdout).toContain('successfully rolled out');
        const pod = (await core.listNamespacedPod({ namespace: 'default', labelSelector: `app=${name}` })).items[0]
          .metadata!.name!;

        const logs = await waitFor('the echo server logged its start', async () => {
          const r = await kubectl(v, ['logs', pod]);
          return r.stdout.includes('8080') ? r : undefined;
        });
        expect(logs.code).toBe(0);

        const ex = await kubectl(v, ['exec', pod, '--', 'sh', '-c', 'echo $MARK; exit 5']);
        expect(ex.stdout).toBe(`mark-${v}\n`);
        expect(ex.code).toBe(5);

        // port-forward: plain SPDY on 1.27 and 1.30, SPDY in a WebSocket on 1.33, to the real pod's port
        const forward = await portForward(v, pod, 8080);
        try {
          const answer = await fetch(`http://127.0.0.1:${forward.local}/through-${v}`);
          expect(await answer.json()).toMatchObject({ pod, path: `/through-${v}` });
        } finally {
          forward.stop();
        }

        const dbg = await kubectl(v, [
          'debug',
          pod,
          '--target=web',
          '--image=devop.test/shell',
          '--',
          'sh',
          '-c',
          'echo debug-from-ephemeral',
        ]);
        expect(dbg.code).toBe(0);
        const debugger_ = /Defaulting debug container name to (debugger-[a-z0-9]+)/.exec(dbg.stderr + dbg.stdout)?.[1];
        expect(debugger_).toBeTruthy();
        const dlogs = await waitFor('the ephemeral container ran', async () => {
          const r = await kubectl(v, ['logs', pod, '-c', debugger_!]);
          return r.stdout.includes('debug-from-ephemeral') ? r : undefined;
        });
        expect(dlogs.stdout).toBe('debug-from-ephemeral\n');

        const del = await kubectl(v, ['delete', 'deploy', name]);
        expect(del.stdout).toContain(`deployment.apps "${name}" deleted`);
        await waitFor(
          'pods gone',
          async () =>
            (await core.listNamespacedPod({ namespace: 'default', labelSelector: `app=${name}` })).items.length === 0,
          60_000,
        );
      },
      SYSTEM_TEST_TIMEOUT_MS,
    );
  }
});
