// The stand-in's node is dual-stack, as a kind cluster made with `networking.ipFamily: dual`: each pod has an IPv4 and
// an IPv6 address (status.podIPs, IPv4 first), reachable from the node and from other pods, and the kubelet's hosts
// file and status.podIPs env are written as kubernetes pkg/kubelet/kubelet_pods.go writes them
// (managedHostsFileContent; podFieldSelectorRuntimeValue: the IPs joined with commas).
import { randomBytes } from 'node:crypto';
import { Resolver } from 'node:dns/promises';
import { isIPv4, isIPv6 } from 'node:net';
import type { CoreV1Api, V1EnvVar, V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import type { ClusterHandle, NodeRuntime } from '../../standin/index.js';
import { execOutput, isReady, waitForPod } from '../../testkit/pods.js';
import { requireRoot } from '../../testkit/root.js';
import { withStandinNode } from '../../testkit/standin-node.js';
import { waitFor } from '../../testkit/wait.js';
import { kernelForwardsIPv6PerInterface } from '../../standin/kubelet/network.js';

requireRoot('stand-in dual-stack pods');

let cluster: ClusterHandle;
let core: CoreV1Api;
let runtime: NodeRuntime;

withStandinNode((node) => {
  ({ cluster, core, runtime } = node);
});

const name = (prefix: string) => `${prefix}-${randomBytes(3).toString('hex')}`;

async function runningPod(body: V1Pod): Promise<V1Pod> {
  await core.createNamespacedPod({ namespace: 'default', body });
  return waitForPod(core, body.metadata!.name!, 'Ready', isReady);
}

/** An http-echo pod listening on both families (`env` added to its container), Ready. */
function echoPod(podName: string, labels: Record<string, string> = {}, env: V1EnvVar[] = []): Promise<V1Pod> {
  return runningPod({
    metadata: { name: podName, labels },
    spec: {
      containers: [
        {
          name: 'echo',
          image: 'devop.test/http-echo',
          env: [{ name: 'LISTEN_HOST', value: '::' }, ...env],
          readinessProbe: { tcpSocket: { port: 8080 }, periodSeconds: 1 },
        },
      ],
    },
  });
}

/** A shell pod that sleeps (tests exec clients in it), Ready. */
function shellPod(podName: string): Promise<V1Pod> {
  return runningPod({
    metadata: { name: podName },
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
    const pod = await echoPod(server, {}, [
      { name: 'POD_IPS', valueFrom: { fieldRef: { fieldPath: 'status.podIPs' } } },
    ]);
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
    const clientPod = await shellPod(client);
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

  // IPv6 ClusterIPs need IPv6 forwarding on the node's bridge alone (force_forwarding, Linux 6.17+): without it the
  // stand-in's Services stay IPv4, as a single-stack cluster's do, and these tests cannot run.
  const dualStackServices = kernelForwardsIPv6PerInterface();

  it.runIf(dualStackServices)(
    'gives a PreferDualStack Service a ClusterIP of each family, reached from a pod and named by A and AAAA records',
    async () => {
      // Given an http-echo pod on both families behind a PreferDualStack Service
      const app = name('dual');
      await echoPod(app, { app });
      const svc = await core.createNamespacedService({
        namespace: 'default',
        body: {
          metadata: { name: app },
          spec: { selector: { app }, ipFamilyPolicy: 'PreferDualStack', ports: [{ port: 80, targetPort: 8080 }] },
        },
      });
      // Then it has both families, IPv4 first (the cluster's default), and clusterIP is the first
      // (kubernetes pkg/registry/core/service/storage/alloc.go initIPFamilyFields, allocClusterIPs)
      expect(svc.spec?.ipFamilies).toEqual(['IPv4', 'IPv6']);
      const [v4, v6] = svc.spec?.clusterIPs ?? [];
      expect(isIPv4(v4)).toBe(true);
      expect(isIPv6(v6)).toBe(true);
      expect(svc.spec?.clusterIP).toBe(v4);
      // And a pod reaches the Service over IPv6 and over IPv4
      const client = name('svc-client');
      await shellPod(client);
      const get = (host: string) =>
        exec(client, [
          'node',
          '-e',
          `fetch('http://${host}/via-service').then((r) => r.json()).then((b) => process.stdout.write(b.pod))`,
        ]);
      await waitFor('the IPv6 ClusterIP to answer', async () => (await get(`[${v6}]`).catch(() => '')) === app);
      expect(await get(v4)).toBe(app);
      // And the cluster DNS names it with an A record for the IPv4 ClusterIP and an AAAA record for the IPv6 one
      const dns = new Resolver();
      dns.setServers([cluster.runtime!.nodeIP]);
      const fqdn = `${app}.default.svc.cluster.local`;
      expect(await dns.resolve4(fqdn)).toEqual([v4]);
      expect(await dns.resolve6(fqdn)).toEqual([v6]);
    },
  );

  it.runIf(dualStackServices)(
    'names a pod by hostname and subdomain with an A and an AAAA record behind a dual-stack headless Service',
    async () => {
      // Given a PreferDualStack headless Service and a pod whose hostname/subdomain name it (a StatefulSet's pod)
      const app = name('pets');
      await core.createNamespacedService({
        namespace: 'default',
        body: {
          metadata: { name: app },
          spec: { clusterIP: 'None', ipFamilyPolicy: 'PreferDualStack', selector: { app }, ports: [{ port: 8080 }] },
        },
      });
      const pet = `${app}-0`;
      const pod = await runningPod({
        metadata: { name: pet, labels: { app } },
        spec: {
          hostname: pet,
          subdomain: app,
          containers: [
            {
              name: 'echo',
              image: 'devop.test/http-echo',
              env: [{ name: 'LISTEN_HOST', value: '::' }],
              readinessProbe: { tcpSocket: { port: 8080 }, periodSeconds: 1 },
            },
          ],
        },
      });
      const [v4, v6] = (pod.status?.podIPs ?? []).map((p) => p.ip ?? '');
      // When the cluster DNS is asked for <hostname>.<svc>.default.svc.cluster.local, once the endpoints have it
      const dns = new Resolver();
      dns.setServers([cluster.runtime!.nodeIP]);
      const fqdn = `${pet}.${app}.default.svc.cluster.local`;
      const a = await waitFor('the A record', () => dns.resolve4(fqdn).catch(() => undefined));
      // Then it answers each family's address of the pod, as CoreDNS plugin/kubernetes/kubernetes.go does from the
      // EndpointSlice of each family, both carrying the hostname (kubernetes/dns docs/specification.md 2.4.1)
      expect(a).toEqual([v4]);
      expect(await dns.resolve6(fqdn)).toEqual([v6]);
      // And another hostname is NXDOMAIN
      await expect(dns.resolve6(`${app}-1.${app}.default.svc.cluster.local`)).rejects.toMatchObject({
        code: 'ENOTFOUND',
      });
    },
  );

  it.runIf(dualStackServices)(
    'an IPv6 SingleStack Service has an IPv6 ClusterIP and IPv6 endpoints; wrong family fields are 422',
    async () => {
      const app = name('six');
      await echoPod(app, { app });
      const svc = await core.createNamespacedService({
        namespace: 'default',
        body: { metadata: { name: app }, spec: { selector: { app }, ipFamilies: ['IPv6'], ports: [{ port: 8080 }] } },
      });
      expect(svc.spec).toMatchObject({ ipFamilyPolicy: 'SingleStack', ipFamilies: ['IPv6'] });
      expect(isIPv6(svc.spec?.clusterIP ?? '')).toBe(true);
      // The endpoints controller writes the Service's primary family (endpoints_controller.go
      // podToEndpointAddressForService)
      const eps = await waitFor('the IPv6 endpoints', async () => {
        const e = await core.readNamespacedEndpoints({ namespace: 'default', name: app }).catch(() => undefined);
        return e?.subsets?.[0]?.addresses?.[0]?.ip;
      });
      expect(isIPv6(eps)).toBe(true);
      // And the node reaches it at that ClusterIP (once its service proxy has the endpoint)
      const answer = () =>
        fetch(`http://[${svc.spec?.clusterIP}]:8080/`, { signal: AbortSignal.timeout(2000) })
          .then((r) => r.json() as Promise<{ pod: string }>)
          .catch(() => undefined);
      await waitFor('the IPv6 ClusterIP to answer the node', async () => (await answer())?.pod === app);
      // Two families with SingleStack is refused in kube-apiserver's words
      const refused = await core
        .createNamespacedService({
          namespace: 'default',
          body: {
            metadata: { name: name('bad') },
            spec: { ipFamilyPolicy: 'SingleStack', ipFamilies: ['IPv4', 'IPv6'], ports: [{ port: 80 }] },
          },
        })
        .then(
          () => undefined,
          (err: { code?: number; body?: string }) => ({ code: err.code, status: JSON.parse(err.body ?? '{}') }),
        );
      expect(refused?.code).toBe(422);
      expect(refused?.status.message).toContain(
        `spec.ipFamilyPolicy: Invalid value: "SingleStack": must be 'RequireDualStack' or 'PreferDualStack' when ` +
          'multiple IP families are specified',
      );
    },
  );
});
