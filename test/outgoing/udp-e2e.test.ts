// Outgoing UDP end to end on the stand-in with the real agent image: under `devop exec`, python3 (through the
// LD_PRELOAD shim) sends UDP to a UDP echo Service by its full name, connected and unconnected, and gets the echo from
// the pod, sent from the target pod; and a DNS query it builds and sends itself to this machine's resolv.conf
// nameserver (as dig does) is answered by the cluster's DNS (standin/kubelet/dns.ts) with the Service's ClusterIP.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { AppsV1Api, CoreV1Api } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import { ROOT, devopExec, startE2ECluster, type Cluster, type DevopRun } from '../../testkit/e2e.js';
import { waitFor } from '../../testkit/wait.js';

requireRoot('outgoing UDP through the agent');

const UDP_CLIENT = join(ROOT, 'test', 'outgoing', 'fixtures', 'udp-client.py');
const RUN_DEADLINE_MS = 120_000;
const TEST_TIMEOUT_MS = 180_000;
const ECHO_PORT = 9999;
/** The pod's echo server: each datagram is answered with `echo <pod> <source address> <datagram>`. */
const ECHO_SERVER =
  'import os, socket\n' +
  's = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n' +
  `s.bind(("0.0.0.0", ${ECHO_PORT}))\n` +
  'while True:\n' +
  '    data, src = s.recvfrom(65535)\n' +
  '    s.sendto(("echo %s %s " % (os.environ["HOSTNAME"], src[0])).encode() + data, src)\n';

async function deploy(
  env: { core: CoreV1Api; apps: AppsV1Api },
  name: string,
  container: Record<string, unknown>,
): Promise<{ podIP: string; podName: string }> {
  await env.apps.createNamespacedDeployment({
    namespace: 'default',
    body: {
      metadata: { name },
      spec: {
        replicas: 1,
        selector: { matchLabels: { app: name } },
        template: { metadata: { labels: { app: name } }, spec: { containers: [{ name: 'app', ...container }] } },
      },
    },
  });
  const pod = await waitFor(`a running pod of ${name}`, async () => {
    const list = await env.core.listNamespacedPod({ namespace: 'default', labelSelector: `app=${name}` });
    return list.items.find((p) => p.status?.podIP && p.status.phase === 'Running');
  });
  return { podIP: pod.status?.podIP ?? '', podName: pod.metadata?.name ?? '' };
}

describe('outgoing UDP and DNS over UDP through the agent', { timeout: TEST_TIMEOUT_MS }, () => {
  let cluster: Cluster;
  let echo: { podIP: string; podName: string };
  let client: { podIP: string };
  let clusterIP: string;
  const runs: DevopRun[] = [];

  beforeAll(async () => {
    const env = await startE2ECluster();
    cluster = env.cluster;
    // Given a UDP echo server in a pod behind a UDP Service udp-echo:9999, and a client workload to run as
    echo = await deploy(env, 'udp-echo', {
      image: 'devop.test/python3',
      command: ['python3', '-c', ECHO_SERVER],
    });
    const service = await env.core.createNamespacedService({
      namespace: 'default',
      body: {
        metadata: { name: 'udp-echo' },
        spec: { selector: { app: 'udp-echo' }, ports: [{ port: ECHO_PORT, targetPort: ECHO_PORT, protocol: 'UDP' }] },
      },
    });
    clusterIP = service.spec?.clusterIP ?? '';
    client = await deploy(env, 'client', { image: 'devop.test/http-echo', env: [{ name: 'PORT', value: '8080' }] });
  });

  afterAll(async () => {
    await Promise.all(runs.map((run) => run.dispose()));
    await cluster?.stop();
  });

  it('python3 gets the echo of a UDP Service by name, connected and not, and its own DNS query answered by the cluster', async () => {
    const name = 'udp-echo.default.svc.cluster.local';
    // When the local command sends UDP to the Service by name (connect()+send, then sendto) and asks this machine's
    // nameserver for the Service's name with a query it builds itself
    const run = devopExec(
      cluster,
      ['-t', 'deploy/client'],
      ['python3', UDP_CLIENT, `connected,${name},${ECHO_PORT},one`, `sendto,${name},${ECHO_PORT},two`, `dns,${name}`],
    );
    runs.push(run);
    const code = await Promise.race([
      run.exited.then((exit) => exit.code),
      new Promise<never>((_, reject) =>
        setTimeout(() => reject(new Error(`devop exec did not finish\n${run.output}`)), RUN_DEADLINE_MS),
      ),
    ]);
    expect(code, run.output).toBe(0);
    const lines = run.stdout
      .split('\n')
      .filter((line) => line.startsWith('{"mode"'))
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    const [connected, unconnected, query] = lines;
    // Then both datagrams were echoed by the pod behind the Service, and came from the client pod (sent in its netns)
    expect(connected, run.output).toMatchObject({ body: `echo ${echo.podName} ${client.podIP} one` });
    expect(unconnected, run.output).toMatchObject({
      body: `echo ${echo.podName} ${client.podIP} two`,
      source: [clusterIP, ECHO_PORT],
    });
    // And the query was answered by the cluster's DNS with the ClusterIP, seemingly by the nameserver it asked
    const nameserver = /^\s*nameserver\s+(\S+)/m.exec(readFileSync('/etc/resolv.conf', 'utf8'))?.[1];
    expect(query, run.output).toMatchObject({ body: [clusterIP], rcode: 0, idMatches: true, source: [nameserver, 53] });
  });
});
