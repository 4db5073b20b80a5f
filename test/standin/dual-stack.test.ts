// The stand-in's node is dual-stack, as a kind cluster made with `networking.ipFamily: dual`: each pod has an IPv4 and
// an IPv6 address (status.podIPs, IPv4 first), reachable from the node and from other pods, and the kubelet's hosts
// file and status.podIPs env are written as kubernetes pkg/kubelet/kubelet_pods.go writes them
// (managedHostsFileContent; podFieldSelectorRuntimeValue: the IPs joined with commas).
import { randomBytes } from 'node:crypto';
import { isIPv4, isIPv6 } from 'node:net';
import { CoreV1Api, KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import type { NodeRuntime } from '../../standin/node-runtime.js';
import { execOutput, isReady, waitForPod } from '../../testkit/pods.js';
import { requireRoot } from '../../testkit/root.js';

requireRoot('stand-in dual-stack pods');

let cluster: ClusterHandle;
let core: CoreV1Api;
let runtime: NodeRuntime;

beforeAll(async () => {
  cluster = await startCluster();
  runtime = cluster.runtime!;
  const kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfigPath);
  core = kc.makeApiClient(CoreV1Api);
});

afterAll(async () => {
  await cluster?.stop();
});

const name = (prefix: string) => `${prefix}-${randomBytes(3).toString('hex')}`;

async function runningPod(body: V1Pod): Promise<V1Pod> {
  await core.createNamespacedPod({ namespace: 'default', body });
  return waitForPod(core, body.metadata!.name!, 'Ready', isReady);
}

async function exec(pod: string, command: string[]): Promise<string> {
  const out = await execOutput(await runtime.exec({ namespace: 'default', pod, command, stdin: false, tty: false }));
  expect(out, `${command.join(' ')}: ${out.stderr}`).toMatchObject({ exitCode: 0 });
  return out.stdout;
}

describe('a dual-stack node', () => {
  it('gives each pod an IPv4 and an IPv6 address that the node and other pods reach', async () => {
    // Given an http-echo pod listening on every address of both families, with its IPs in its env
    const server = name('echo6');
    const pod = await runningPod({
      metadata: { name: server },
      spec: {
        containers: [
          {
            name: 'echo',
            image: 'devop.test/http-echo',
            env: [
              { name: 'LISTEN_HOST', value: '::' },
              { name: 'POD_IPS', valueFrom: { fieldRef: { fieldPath: 'status.podIPs' } } },
            ],
            readinessProbe: { tcpSocket: { port: 8080 }, periodSeconds: 1 },
          },
        ],
      },
    });
    // Then its status lists both families, IPv4 first, and podIP is the IPv4 one
    const ips = (pod.status?.podIPs ?? []).map((p) => p.ip ?? '');
    expect(ips).toHaveLength(2);
    expect(isIPv4(ips[0])).toBe(true);
    expect(isIPv6(ips[1])).toBe(true);
    expect(pod.status?.podIP).toBe(ips[0]);
    // And the node reaches it over IPv6
    const res = await fetch(`http://[${ips[1]}]:8080/six`);
    expect(((await res.json()) as { path: string }).path).toBe('/six');
    // And so does another pod, from its own IPv6 address
    const client = name('client6');
    const clientPod = await runningPod({
      metadata: { name: client },
      spec: {
        containers: [
          {
            name: 'sh',
            image: 'devop.test/shell',
            command: ['sleep', '3600'],
            readinessProbe: { exec: { command: ['true'] }, periodSeconds: 1 },
          },
        ],
      },
    });
    const clientIP6 = (clientPod.status?.podIPs ?? [])[1]?.ip;
    const echoed = JSON.parse(
      await exec(client, [
        'node',
        '-e',
        `fetch('http://[${ips[1]}]:8080/from-pod').then((r) => r.text()).then((t) => process.stdout.write(t))`,
      ]),
    ) as { remoteAddress: string };
    expect(echoed.remoteAddress).toBe(clientIP6);
    // And the pod's env and hosts file carry both IPs as the kubelet writes them
    expect((await exec(server, ['sh', '-c', 'printf %s "$POD_IPS"'])).trim()).toBe(ips.join(','));
    const hosts = await exec(server, ['cat', '/etc/hosts']);
    expect(hosts).toContain(`${ips[0]}\t${server}\n`);
    expect(hosts).toContain(`${ips[1]}\t${server}\n`);
    expect(hosts).toContain('fe00::1\tip6-allnodes\n');
  });
});
