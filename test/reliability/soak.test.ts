// Soak: many stolen connections (200 at a time, random sizes up to 1 MiB each way, checked byte for byte with seeded
// streams and SHA-256) through one devop session on the stand-in; 0 lost or corrupted bytes; the agent's RSS is sampled
// and reported. DEVOP_SOAK_CONNECTIONS sets the count (default 1000 for CI; the full run is 10 000, see
// docs/safety.md).
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import {
  type DevopRun,
  devopExec,
  killLocalServer,
  startE2ECluster,
  startPodClient,
  type Cluster,
} from '../../testkit/e2e.js';
import { agentNodePids, agentPods, deployReplicas, podPid, rssBytes, type Env } from './harness.js';
import { waitFor } from '../../testkit/wait.js';
import { freePort } from '../../testkit/sockets.js';

requireRoot('reliability: soak');

const CONNECTIONS = Number(process.env.DEVOP_SOAK_CONNECTIONS ?? 1000);
const CONCURRENCY = Number(process.env.DEVOP_SOAK_CONCURRENCY ?? 200);
const MAX_BYTES = 1024 * 1024;
/** How often the agent's RSS is read. */
const RSS_SAMPLE_MS = 250;
const FIXTURES = join(import.meta.dirname, 'fixtures');

interface SoakSummary {
  total: number;
  ok: number;
  failed: number;
  corruptedRequests: number;
  corruptedResponses: number;
  bytesSent: number;
  bytesReceived: number;
  errors: Record<string, number>;
  seconds: number;
}

/** Runs the soak client inside the client pod's netns; resolves with its summary. */
function runClient(clientPid: number, host: string): Promise<SoakSummary> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      'nsenter',
      [
        '-t',
        String(clientPid),
        '-n',
        process.execPath,
        join(FIXTURES, 'soak-client.mjs'),
        host,
        '8080',
        String(CONNECTIONS),
        String(CONCURRENCY),
        String(MAX_BYTES),
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    let err = '';
    child.stdout.setEncoding('utf8').on('data', (t: string) => (out += t));
    child.stderr.setEncoding('utf8').on('data', (t: string) => (err += t));
    child.on('error', reject);
    child.on('exit', (code) => {
      if (code !== 0) return reject(new Error(`soak client exited ${code}: ${err}`));
      resolve(JSON.parse(out.trim().split('\n').pop() ?? '{}') as SoakSummary);
    });
  });
}

describe('soak: stolen connections through one session', () => {
  let cluster: Cluster;
  let env: Env;
  let run: DevopRun | undefined;

  beforeAll(async () => {
    const e = await startE2ECluster();
    cluster = e.cluster;
    env = e;
  });

  afterAll(async () => {
    if (run) {
      await run.stop('SIGKILL');
      killLocalServer(run);
    }
    await cluster?.stop();
  });

  it(
    `${CONNECTIONS} connections, ${CONCURRENCY} at a time, up to 1 MiB each way: 0 lost or corrupted bytes`,
    async () => {
      const [pod] = await deployReplicas(env, 'soak', 1);
      await startPodClient(env);
      const clientPod = await env.core.readNamespacedPod({ name: 'client', namespace: 'default' });
      const clientPid = await podPid(clientPod);
      const local = await freePort();
      run = devopExec(
        cluster,
        ['-t', 'deploy/soak', '--steal', '-p', `8080:${local}`],
        [process.execPath, join(FIXTURES, 'soak-server.mjs')],
        { env: { LOCAL_PORT: String(local) } },
      );
      await run.ready();

      // The agent's processes: the one inside the pod netns carries the connections.
      const [agent] = await waitFor('the agent pod', async () => {
        const pods = await agentPods(env, pod.metadata?.name ?? '');
        return pods.length > 0 ? pods : undefined;
      });
      const pids = await agentNodePids(agent);
      const samples: number[] = [];
      let sampling = true;
      const sampler = (async () => {
        while (sampling) {
          const rss = await Promise.all(pids.map(rssBytes));
          samples.push(Math.max(...rss));
          await new Promise((r) => setTimeout(r, RSS_SAMPLE_MS));
        }
      })();

      const summary = await runClient(clientPid, pod.status?.podIP ?? '');
      sampling = false;
      await sampler;
      const mib = (n: number) => (n / 1024 / 1024).toFixed(1);
      const maxRss = Math.max(...samples);
      console.log(
        `RESULT soak connections=${summary.total} concurrency=${CONCURRENCY} ok=${summary.ok} ` +
          `failed=${summary.failed} corrupted=${summary.corruptedRequests + summary.corruptedResponses} ` +
          `mib_sent=${mib(summary.bytesSent)} mib_received=${mib(summary.bytesReceived)} seconds=${summary.seconds} ` +
          `agent_rss_max_mib=${mib(maxRss)} agent_rss_last_mib=${mib(samples[samples.length - 1] ?? 0)} ` +
          `samples=${samples.length}`,
      );
      expect(summary.errors).toEqual({});
      expect(summary.failed).toBe(0);
      expect(summary.corruptedRequests).toBe(0);
      expect(summary.corruptedResponses).toBe(0);
      expect(summary.ok).toBe(CONNECTIONS);
      // The devop session is still up and stealing.
      expect(run.child.exitCode).toBeNull();
    },
    30 * 60_000,
  );
});
