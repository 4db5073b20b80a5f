// Outgoing for statically linked programs, end to end on the stand-in: under `devop exec --outgoing-netns`, a client
// built with cc -static that resolves as Go's resolver does (its own UDP query to the nameserver of /etc/resolv.conf)
// reaches a ClusterIP Service by its full name and by its ClusterIP from the target pod, through the command's network
// namespace; a port the pod is refused on is ECONNREFUSED; an unknown name is NXDOMAIN; a server on this
// machine's loopback stays reachable. Without the flag the same client resolves with this machine's DNS and fails.
// A local server in the namespace still gets the pod's stolen traffic (its port is published to this machine).
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AppsV1Api, CoreV1Api } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ROOT,
  deployEcho,
  devopExec,
  LOCAL_SERVER_COMMAND,
  seenRequests,
  startE2ECluster,
  startPodClient,
  type Cluster,
  type DevopRun,
  type EchoDeployment,
  type PodClient,
} from '../../testkit/e2e.js';
import { freePort } from '../../testkit/sockets.js';
import { startHttpEcho, type Closable } from '../../testkit/outgoing.js';
import { requireRoot } from '../../testkit/root.js';
import { waitFor } from '../../testkit/wait.js';

requireRoot('outgoing for statically linked programs (--outgoing-netns)');

const CLIENT_SOURCE = join(ROOT, 'test', 'outgoing', 'fixtures', 'static-client.c');
/** A devop run (agent start-up included) on a loaded machine; below TEST_TIMEOUT_MS so that its output is shown. */
const RUN_DEADLINE_MS = 120_000;
const TEST_TIMEOUT_MS = 180_000;
const ECONNREFUSED = 111;
const NXDOMAIN = 3;

interface ClientLine {
  target: string;
  address?: string;
  body?: { pod?: string; path?: string; remoteAddress?: string; name?: string; url?: string } | null;
  error?: string;
  code?: number;
  rcode?: number;
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
    .filter((line) => line.startsWith('{"target"'))
    .map((line) => JSON.parse(line) as ClientLine);
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

describe('outgoing for statically linked programs through --outgoing-netns', { timeout: TEST_TIMEOUT_MS }, () => {
  let cluster: Cluster;
  let echo: EchoDeployment;
  let client: { podIP: string };
  let clusterIP: string;
  let work: string;
  let staticClient: string;
  let thisMachine: Closable;
  let caller: PodClient;
  const runs: DevopRun[] = [];

  beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), 'devop-netns-e2e-'));
    staticClient = join(work, 'static-client');
    // Given a statically linked client that asks the nameserver of /etc/resolv.conf itself, over UDP
    execFileSync('cc', ['-O2', '-static', '-o', staticClient, CLIENT_SOURCE], { stdio: 'ignore' });
    // And a server on this machine's loopback
    thisMachine = await startHttpEcho('this-machine');
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
    caller = await startPodClient(env, 'caller');
  });

  afterAll(async () => {
    caller?.close();
    await Promise.all(runs.map((run) => run.dispose()));
    await cluster?.stop();
    await thisMachine?.close();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('a cc -static client reaches the service by name and ClusterIP from the pod; refusals, unknown names, this machine', async () => {
    const name = 'echo.default.svc.cluster.local';
    // When the static client runs under devop exec --outgoing-netns: by name, by ClusterIP, to a closed port of the
    // echo pod, to a name the cluster does not know, and to the server on this machine's loopback
    const script = [
      `${staticClient} ${name} 80 /static-by-name`,
      `${staticClient} ${clusterIP} 80 /static-by-ip`,
      `${staticClient} ${echo.podIP} 81 /`,
      `${staticClient} nosuch.default.svc.cluster.local 80 /`,
      `${staticClient} 127.0.0.1 ${thisMachine.port} /this-machine`,
    ].join('; ');
    const run = devopExec(cluster, ['-t', 'deploy/client', '--outgoing-netns'], ['sh', '-c', script]);
    runs.push(run);
    expect(await finished(run, 'devop exec --outgoing-netns'), run.output).toBe(0);
    const [byName, byIp, refused, unknown, local] = clientLines(run.stdout);
    // Then both connections were answered by the echo pod and came from the client pod (they left from the pod)
    expect(byName, run.output).toMatchObject({ address: clusterIP, body: { path: '/static-by-name' } });
    expect(byIp, run.output).toMatchObject({ body: { path: '/static-by-ip' } });
    for (const line of [byName, byIp]) {
      expect(line?.body?.pod).toBe(echo.podName);
      expect(line?.body?.remoteAddress?.replace(/^::ffff:/, '')).toBe(client.podIP);
    }
    // And a closed port fails the program's connect() with ECONNREFUSED, as the pod's connect failed
    expect(refused, run.output).toMatchObject({ error: 'connect', code: ECONNREFUSED });
    // And a name the cluster does not know is NXDOMAIN
    expect(unknown, run.output).toMatchObject({ error: 'dns', rcode: NXDOMAIN });
    // And this machine's loopback is still this machine's
    expect(local, run.output).toMatchObject({ body: { name: 'this-machine', url: '/this-machine' } });
  });

  it("without --outgoing-netns the same client asks this machine's DNS, which does not know the name", async () => {
    // When it runs under devop exec without the flag
    const run = devopExec(
      cluster,
      ['-t', 'deploy/client'],
      [staticClient, 'echo.default.svc.cluster.local', '80', '/'],
    );
    runs.push(run);
    expect(await finished(run, 'devop exec without --outgoing-netns'), run.output).toBe(0);
    // Then its lookup fails (no LD_PRELOAD in a static program)
    expect(clientLines(run.stdout)[0], run.output).toMatchObject({ error: 'dns' });
  });

  it("a local server in the namespace answers the pod's stolen requests", async () => {
    // When devop steals the echo pod's port for a local server that runs under --outgoing-netns
    const local = await freePort();
    const run = devopExec(
      cluster,
      ['-t', 'deploy/echo', '--steal', '-p', `8080:${local}`, '--outgoing-netns'],
      [...LOCAL_SERVER_COMMAND],
      { env: { LOCAL_PORT: String(local) } },
    );
    runs.push(run);
    await run.ready();
    // Then a request from another pod to the echo pod is answered by the local server, inside its namespace
    expect(await caller.who(echo.podIP, 8080, '/stolen-into-netns'), run.output).toBe('local');
    expect(seenRequests(run).map((r) => r.path)).toContain('/stolen-into-netns');
    expect(run.stderr).toContain('the command runs in a network namespace of its own');
  });
});
