// Outgoing for programs other than Node, end to end on the stand-in: under `devop exec`, python3 (a raw
// socket.create_connection and asyncio.open_connection) and a dynamically linked C client reach a ClusterIP Service
// by its full name and by its ClusterIP from the target pod, through the LD_PRELOAD shim; a closed port is refused, an
// unknown name fails like a lookup failure. A statically linked program (cc -static) is not covered: the shim is never
// loaded into it, and the test shows that it resolves with this machine's resolver (docs/outgoing.md says what to do).
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AppsV1Api, CoreV1Api } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import {
  ROOT,
  deployEcho,
  devopExec,
  startE2ECluster,
  type Cluster,
  type DevopRun,
  type EchoDeployment,
} from '../../testkit/e2e.js';
import { waitFor } from '../../testkit/wait.js';

requireRoot('outgoing for dynamically linked programs (LD_PRELOAD shim)');

const PYTHON = '/usr/bin/python3';
const PY_CLIENT = join(ROOT, 'test', 'outgoing', 'fixtures', 'raw-client.py');
const C_CLIENT_SOURCE = join(ROOT, 'test', 'outgoing', 'fixtures', 'raw-client.c');
/** A devop run (agent start-up included) on a loaded machine; below TEST_TIMEOUT_MS so that its output is shown. */
const RUN_DEADLINE_MS = 120_000;
const TEST_TIMEOUT_MS = 180_000;
const EAI_NONAME = -2;
const ECONNREFUSED = 111;

interface ClientLine {
  mode?: string;
  target: string;
  body?: unknown;
  error?: string;
  errno?: number;
  code?: number;
}

interface EchoAnswer {
  pod: string;
  path: string;
  remoteAddress: string;
}

/** A Deployment that declares no ports: the workload the local command runs as (nothing to steal or mirror). */
async function deployClient(env: { core: CoreV1Api; apps: AppsV1Api }, name: string): Promise<{ podIP: string }> {
  await env.apps.createNamespacedDeployment({
    namespace: 'default',
    body: {
      metadata: { name },
      spec: {
        replicas: 1,
        selector: { matchLabels: { app: name } },
        template: {
          metadata: { labels: { app: name } },
          spec: {
            containers: [{ name: 'app', image: 'devop.test/http-echo', env: [{ name: 'PORT', value: '8080' }] }],
          },
        },
      },
    },
  });
  const pod = await waitFor(`a running pod of ${name}`, async () => {
    const list = await env.core.listNamespacedPod({ namespace: 'default', labelSelector: `app=${name}` });
    return list.items.find((p) => p.status?.podIP && p.status.phase === 'Running');
  });
  return { podIP: pod.status?.podIP ?? '' };
}

function clientLines(stdout: string): ClientLine[] {
  return stdout
    .split('\n')
    .filter((line) => line.startsWith('{"mode"') || line.startsWith('{"target"'))
    .map((line) => JSON.parse(line) as ClientLine);
}

/** The echo's answer in a client line (Python prints the body as a string, the C client as JSON). */
function answerOf(line: ClientLine | undefined): EchoAnswer | undefined {
  if (!line?.body) return undefined;
  return (typeof line.body === 'string' ? JSON.parse(line.body) : line.body) as EchoAnswer;
}

async function finished(run: DevopRun, what: string): Promise<number | null> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish\n${run.output}`)), RUN_DEADLINE_MS);
  });
  try {
    return (await Promise.race([run.exited, deadline])).code;
  } finally {
    clearTimeout(timer);
  }
}

describe('outgoing for dynamically linked programs through the LD_PRELOAD shim', { timeout: TEST_TIMEOUT_MS }, () => {
  let cluster: Cluster;
  let echo: EchoDeployment;
  let client: { podIP: string };
  let clusterIP: string;
  let work: string;
  let dynamicClient: string;
  let staticClient: string;
  const runs: DevopRun[] = [];

  beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), 'devop-shim-e2e-'));
    dynamicClient = join(work, 'raw-client');
    staticClient = join(work, 'raw-client-static');
    // Given the same C client linked dynamically (glibc) and statically
    execFileSync('cc', ['-O2', '-o', dynamicClient, C_CLIENT_SOURCE]);
    execFileSync('cc', ['-O2', '-static', '-o', staticClient, C_CLIENT_SOURCE], { stdio: 'ignore' });
    const env = await startE2ECluster();
    cluster = env.cluster;
    // And an echo Deployment behind a ClusterIP Service echo:80, and a client workload to run as
    echo = await deployEcho(env, 'echo');
    const service = await env.core.createNamespacedService({
      namespace: 'default',
      body: {
        metadata: { name: 'echo' },
        spec: { selector: { app: 'echo' }, ports: [{ port: 80, targetPort: 8080 }] },
      },
    });
    clusterIP = service.spec?.clusterIP ?? '';
    client = await deployClient(env, 'client');
  });

  afterAll(async () => {
    await Promise.all(runs.map((run) => run.dispose()));
    await cluster?.stop();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('python3 and a C client reach the service by name and ClusterIP from the pod; refusals and unknown names fail as they would there', async () => {
    const name = 'echo.default.svc.cluster.local';
    const unknown = 'nosuch.default.svc.cluster.local';
    // When the local command is python3 with raw sockets and asyncio, then the C client, each by name and by ClusterIP,
    // to a closed port of the echo pod, and to a name the cluster does not know
    const python = [
      PYTHON,
      PY_CLIENT,
      `timeout,${name},80,/py-by-name`,
      `blocking,${clusterIP},80,/py-by-ip`,
      `asyncio,${name},80,/py-asyncio-by-name`,
      `asyncio,${clusterIP},80,/py-asyncio-by-ip`,
      `blocking,${echo.podIP},81,/`,
      `asyncio,${echo.podIP},81,/`,
      `timeout,${unknown},80,/`,
    ].join(' ');
    const script = [
      python,
      `${dynamicClient} ${name} 80 /c-by-name`,
      `${dynamicClient} ${clusterIP} 80 /c-by-ip`,
      `${dynamicClient} ${echo.podIP} 81 /`,
      `${dynamicClient} ${unknown} 80 /`,
      `${staticClient} ${name} 80 /static-by-name`,
      // This machine's own name (Java's InetAddress.getLocalHost, Python's getfqdn look it up) is not the pod's to
      // answer: it stays local.
      `${PYTHON} -c 'import json, socket; n = socket.gethostname(); ` +
        `print(json.dumps({"mode": "own-name", "target": n, "body": socket.gethostbyname(n)}))'`,
    ].join(' && ');
    const run = devopExec(cluster, ['-t', 'deploy/client'], ['sh', '-c', script]);
    runs.push(run);
    expect(await finished(run, 'devop exec python3 and C clients'), run.output).toBe(0);
    const lines = clientLines(run.stdout);
    expect(lines, run.output).toHaveLength(13);
    const [pyName, pyIp, aioName, aioIp, pyRefused, aioRefused, pyUnknown] = lines.slice(0, 7);
    const [cName, cIp, cRefused, cUnknown, staticName, ownName] = lines.slice(7);
    // Then each connection was answered by the echo pod, and came from the client pod (it went out of the pod)
    const reached = [pyName, pyIp, aioName, aioIp, cName, cIp].map(answerOf);
    expect(
      reached.map((answer) => answer?.path),
      run.output,
    ).toEqual(['/py-by-name', '/py-by-ip', '/py-asyncio-by-name', '/py-asyncio-by-ip', '/c-by-name', '/c-by-ip']);
    for (const answer of reached) {
      expect(answer?.pod).toBe(echo.podName);
      expect(answer?.remoteAddress.replace(/^::ffff:/, '')).toBe(client.podIP);
    }
    // And a closed port is ECONNREFUSED (from the pod's connect), an unknown name EAI_NONAME (from its DNS)
    for (const line of [pyRefused, aioRefused])
      expect(line, run.output).toMatchObject({ error: 'ConnectionRefusedError' });
    expect(cRefused).toMatchObject({ error: 'connect', code: ECONNREFUSED });
    expect(pyUnknown).toMatchObject({ error: 'gaierror', errno: EAI_NONAME });
    expect(cUnknown).toMatchObject({ error: 'getaddrinfo', code: EAI_NONAME });
    // And the statically linked client is not covered: it never loads the shim, so this machine's resolver, which
    // does not know cluster names, answers it (docs/outgoing.md: use the proxy env, e.g. Go's net/http and
    // HTTPS_PROXY, or a devop port-forward)
    expect(staticName, run.output).toMatchObject({ error: 'getaddrinfo' });
    // And this machine's own name resolved here
    expect(ownName?.body, run.output).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
  });
});
