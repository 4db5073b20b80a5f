// ClusterIP Services on the stand-in node: the host and pods reach a Service's ready endpoints through the ClusterIP
// (iptables DNAT, random balancing), a pod reaches itself through its Service, and a Service without endpoints refuses.
import { randomBytes } from 'node:crypto';
import { get } from 'node:http';
import { connect } from 'node:net';
import { Resolver } from 'node:dns/promises';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { execOutput, isReady, waitForPod } from '../../testkit/pods.js';
import { waitFor } from '../../testkit/wait.js';

requireRoot('stand-in kubelet services');

let cluster: ClusterHandle;
let core: CoreV1Api;
/** node inside the images (busybox here is devop.test/shell, which has it). */
const NODE = '/usr/local/bin/node';

beforeAll(async () => {
  cluster = await startCluster();
  const kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfigPath);
  core = kc.makeApiClient(CoreV1Api);
});

afterAll(async () => {
  await cluster?.stop();
});

async function echoPod(name: string, app: string): Promise<void> {
  await core.createNamespacedPod({
    namespace: 'default',
    body: {
      metadata: { name, labels: { app } },
      spec: {
        containers: [
          {
            name: 'echo',
            image: 'devop.test/http-echo',
            ports: [{ name: 'http', containerPort: 8080 }],
            readinessProbe: { tcpSocket: { port: 8080 }, periodSeconds: 1 },
          },
        ],
      },
    },
  });
}

/** One request on a new connection (fetch would keep one connection alive, so always reach the same endpoint). */
function getPod(url: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = get(url, { agent: false, timeout: 5000 }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve((JSON.parse(body) as { pod: string }).pod));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
  });
}

/** Runs a fetch from inside a pod (exec) and returns the JSON the echo server answered, or the error code. */
async function fetchFromPod(
  pod: string,
  url: string,
): Promise<{ pod?: string; remoteAddress?: string; error?: string }> {
  const script =
    `fetch(${JSON.stringify(url)}, { signal: AbortSignal.timeout(5000) }).then((r) => ` +
    `r.text()).then((t) => console.log(t), (e) => console.log(JSON.stringify({ error: e.cause?.code ?? e.name })))`;
  const out = await execOutput(
    await cluster.runtime!.exec({ namespace: 'default', pod, command: [NODE, '-e', script], stdin: false, tty: false }),
  );
  return JSON.parse(out.stdout);
}

describe('stand-in ClusterIP services', () => {
  it('balances the host’s and pods’ connections to a ClusterIP over the ready endpoints', async () => {
    // Given two ready echo pods behind a Service, and a client pod
    const app = `web-${randomBytes(2).toString('hex')}`;
    await echoPod(`${app}-a`, app);
    await echoPod(`${app}-b`, app);
    await echoPod(`${app}-client`, 'client');
    const svc = await core.createNamespacedService({
      namespace: 'default',
      body: {
        metadata: { name: app },
        spec: { selector: { app }, ports: [{ name: 'http', port: 80, targetPort: 'http' }] },
      },
    });
    const ip = svc.spec!.clusterIP!;
    expect(
      cluster.runtime &&
        ip.startsWith((cluster.runtime as { serviceCIDR?: string }).serviceCIDR!.split('.').slice(0, 3).join('.')),
    ).toBe(true);
    for (const p of ['a', 'b', 'client']) await waitForPod(core, `${app}-${p}`, 'Ready', isReady);
    // When the host calls the ClusterIP many times
    const seen = new Set<string>();
    await waitFor('both endpoints answer', async () => {
      seen.add(await getPod(`http://${ip}/`));
      return seen.size === 2;
    });
    // Then both endpoints answered
    expect([...seen].sort()).toEqual([`${app}-a`, `${app}-b`]);
    // And a pod reaches it too, seen from the endpoint with its own pod IP (not masqueraded)
    const client = await core.readNamespacedPod({ namespace: 'default', name: `${app}-client` });
    const fromPod = await fetchFromPod(`${app}-client`, `http://${ip}/`);
    expect([`${app}-a`, `${app}-b`]).toContain(fromPod.pod);
    expect(fromPod.remoteAddress).toBe(client.status!.podIP);
    // And an endpoint reaches itself through its own Service (hairpin)
    const hairpin = new Set<string>();
    await waitFor('hairpin to itself', async () => {
      const r = await fetchFromPod(`${app}-a`, `http://${ip}/`);
      if (r.pod) hairpin.add(r.pod);
      return hairpin.has(`${app}-a`);
    });
    // When one endpoint goes away, only the other answers
    await core.deleteNamespacedPod({ namespace: 'default', name: `${app}-a` });
    await waitFor('endpoint a removed', async () => {
      const eps = await core.readNamespacedEndpoints({ namespace: 'default', name: app });
      return (eps.subsets ?? []).flatMap((s) => s.addresses ?? []).length === 1;
    });
    await waitFor('rules follow the endpoints', async () => {
      for (let i = 0; i < 10; i++) {
        if ((await getPod(`http://${ip}/`)) !== `${app}-b`) return false;
      }
      return true;
    });
  });

  it('refuses a ClusterIP port without endpoints at once, and serves the kubernetes Service to pods', async () => {
    const name = `lonely-${randomBytes(2).toString('hex')}`;
    const svc = await core.createNamespacedService({
      namespace: 'default',
      body: { metadata: { name }, spec: { selector: { app: name }, ports: [{ port: 81, targetPort: 8080 }] } },
    });
    const code = await waitFor('refused', async () => {
      const c = await fetch(`http://${svc.spec!.clusterIP}:81/`, { signal: AbortSignal.timeout(3000) }).then(
        () => 'connected',
        (e: Error & { cause?: { code?: string } }) => e.cause?.code ?? e.name,
      );
      return c === 'ECONNREFUSED' ? c : undefined;
    });
    expect(code).toBe('ECONNREFUSED');
    // A pod calls the API server through KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT
    const pod = `api-client-${randomBytes(2).toString('hex')}`;
    await core.createNamespacedPod({
      namespace: 'default',
      body: {
        metadata: { name: pod },
        spec: { containers: [{ name: 'main', image: 'busybox', command: ['sleep', '3600'] }] },
      },
    });
    await waitForPod(core, pod, 'Running', (p) => p.status?.phase === 'Running');
    const script =
      'const { KUBERNETES_SERVICE_HOST: host, KUBERNETES_SERVICE_PORT: port } = process.env;' +
      'fetch(`https://${host}:${port}/version`)' +
      '.then((r) => console.log(r.status), (e) => console.log(e.cause?.code ?? e.message))';
    const out = await execOutput(
      await cluster.runtime!.exec({
        namespace: 'default',
        pod,
        command: ['env', 'NODE_TLS_REJECT_UNAUTHORIZED=0', NODE, '-e', script],
        stdin: false,
        tty: false,
      }),
    );
    expect(out.stdout.trim()).toMatch(/^(200|401|403)$/);
  });

  it('answers cluster DNS: Service names with the search path from pods, pod names, NXDOMAIN for the rest', async () => {
    // Given a Service and a pod
    const name = `dns-${randomBytes(2).toString('hex')}`;
    const svc = await core.createNamespacedService({
      namespace: 'default',
      body: { metadata: { name }, spec: { selector: { app: name }, ports: [{ name: 'http', port: 80 }] } },
    });
    const ip = svc.spec!.clusterIP!;
    const pod = `${name}-client`;
    await core.createNamespacedPod({
      namespace: 'default',
      body: {
        metadata: { name: pod },
        spec: { containers: [{ name: 'main', image: 'busybox', command: ['sleep', '3600'] }] },
      },
    });
    const podIP = (await waitForPod(core, pod, 'Running', (p) => p.status?.phase === 'Running')).status!.podIP!;
    // When a pod resolves the short, namespaced and full names (glibc, its resolv.conf search path, ndots:5)
    const lookup = async (host: string) =>
      execOutput(
        await cluster.runtime!.exec({
          namespace: 'default',
          pod,
          command: ['getent', 'hosts', host],
          stdin: false,
          tty: false,
        }),
      );
    for (const host of [name, `${name}.default`, `${name}.default.svc`, `${name}.default.svc.cluster.local`]) {
      const out = await lookup(host);
      expect(out.stdout.split(/\s+/)[0], host).toBe(ip);
    }
    // Then unknown names fail (no upstream), at once
    const unknown = await lookup('no-such-service.default');
    expect(unknown.exitCode).toBe(2);
    expect((await lookup('example.com')).exitCode).toBe(2);
    // And from the host, over UDP and TCP, the DNS server answers Services, pods (dashed IP) and SRV records
    const resolver = new Resolver({ timeout: 2000, tries: 2 });
    resolver.setServers([cluster.nodeIP]);
    expect(await resolver.resolve4(`${name}.default.svc.cluster.local`)).toEqual([ip]);
    expect(await resolver.resolve4(`${podIP.replace(/\./g, '-')}.default.pod.cluster.local`)).toEqual([podIP]);
    // (Node 24 adds type: 'SRV' to each record; Node 20 does not.)
    expect(await resolver.resolveSrv(`_http._tcp.${name}.default.svc.cluster.local`)).toEqual([
      expect.objectContaining({ name: `${name}.default.svc.cluster.local`, port: 80, priority: 0, weight: 100 }),
    ]);
    await expect(resolver.resolve4(`missing.default.svc.cluster.local`)).rejects.toMatchObject({ code: 'ENOTFOUND' });
    expect(await resolver.resolve6(`${name}.default.svc.cluster.local`).catch((e: { code: string }) => e.code)).toBe(
      'ENODATA',
    );
    const nodeLookup = await execOutput(
      await cluster.runtime!.exec({
        namespace: 'default',
        pod,
        command: [NODE, '-e', `require('dns').lookup('${name}', (e, a) => console.log(e ? e.code : a))`],
        stdin: false,
        tty: false,
      }),
    );
    expect(nodeLookup.stdout.trim()).toBe(ip);
    // Over TCP (length-prefixed messages), as resolvers do for large answers
    const qname = Buffer.concat([
      ...`${name}.default.svc.cluster.local`
        .split('.')
        .map((l) => Buffer.concat([Buffer.from([l.length]), Buffer.from(l)])),
      Buffer.from([0]),
    ]);
    const query = Buffer.concat([
      Buffer.from([0xab, 0xcd, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]),
      qname,
      Buffer.from([0, 1, 0, 1]),
    ]);
    const reply = await new Promise<Buffer>((resolve, reject) => {
      const sock = connect(53, cluster.nodeIP, () =>
        sock.write(Buffer.concat([Buffer.from([query.length >> 8, query.length & 0xff]), query])),
      );
      let buf = Buffer.alloc(0);
      sock.on('data', (c: Buffer) => {
        buf = Buffer.concat([buf, c]);
        if (buf.length >= 2 && buf.length >= 2 + buf.readUInt16BE(0)) {
          sock.destroy();
          resolve(buf.subarray(2));
        }
      });
      sock.on('error', reject);
    });
    expect(reply.readUInt16BE(0)).toBe(0xabcd);
    expect(reply.readUInt16BE(2) & 0x000f).toBe(0);
    expect(reply.readUInt16BE(6)).toBe(1);
    expect([...reply.subarray(reply.length - 4)].join('.')).toBe(ip);
  });

  it('names a pod by hostname and subdomain, <hostname>.<svc>.<ns>.svc, as a StatefulSet’s pod', async () => {
    // Given a headless Service and, behind it, a pod whose hostname/subdomain name it (as a StatefulSet's pod is
    // made: hostname = pod name, subdomain = serviceName) and a pod whose subdomain names another Service
    const svcName = `peers-${randomBytes(2).toString('hex')}`;
    await core.createNamespacedService({
      namespace: 'default',
      body: {
        metadata: { name: svcName },
        spec: { clusterIP: 'None', selector: { app: svcName }, ports: [{ name: 'http', port: 8080 }] },
      },
    });
    const member = async (name: string, subdomain: string) =>
      core.createNamespacedPod({
        namespace: 'default',
        body: {
          metadata: { name, labels: { app: svcName } },
          spec: {
            hostname: name,
            subdomain,
            containers: [
              {
                name: 'echo',
                image: 'devop.test/http-echo',
                ports: [{ name: 'http', containerPort: 8080 }],
                readinessProbe: { tcpSocket: { port: 8080 }, periodSeconds: 1 },
              },
            ],
          },
        },
      });
    const pet = `${svcName}-0`;
    const stranger = `${svcName}-x`;
    await member(pet, svcName);
    await member(stranger, 'elsewhere');
    const client = `${svcName}-client`;
    await echoPod(client, 'client');
    const petIP = (await waitForPod(core, pet, 'Ready', isReady)).status!.podIP!;
    const strangerIP = (await waitForPod(core, stranger, 'Ready', isReady)).status!.podIP!;
    await waitForPod(core, client, 'Ready', isReady);
    // Then the endpoints controller writes the hostname on that pod's address only (kubernetes
    // pkg/controller/endpoint/endpoints_controller.go syncService; ShouldSetHostname in
    // staging/src/k8s.io/endpointslice/util/controller_utils.go: spec.hostname set, spec.subdomain = the Service)
    const addresses = await waitFor('both pods in the Service’s endpoints', async () => {
      const eps = await core.readNamespacedEndpoints({ namespace: 'default', name: svcName }).catch(() => undefined);
      const all = (eps?.subsets ?? []).flatMap((s) => s.addresses ?? []);
      return all.length === 2 ? all : undefined;
    });
    expect(addresses.find((a) => a.ip === petIP)?.hostname).toBe(pet);
    expect(addresses.find((a) => a.ip === strangerIP)?.hostname).toBeUndefined();
    // When the client pod resolves the pod's name, full and through its search path (glibc, ndots:5)
    const lookup = async (host: string) =>
      execOutput(
        await cluster.runtime!.exec({
          namespace: 'default',
          pod: client,
          command: ['getent', 'hosts', host],
          stdin: false,
          tty: false,
        }),
      );
    // Then the cluster DNS answers with that pod's IP, as CoreDNS plugin/kubernetes/kubernetes.go does (findServices:
    // an endpoint name matched against endpointHostname) and the Kubernetes DNS specification requires (kubernetes/dns
    // docs/specification.md, 2.4.1: <hostname>.<service>.<ns>.svc.<zone> A <endpoint-ip>)
    for (const host of [`${pet}.${svcName}.default.svc.cluster.local`, `${pet}.${svcName}`]) {
      const out = await lookup(host);
      expect(out, host).toMatchObject({ exitCode: 0 });
      expect(out.stdout.split(/\s+/)[0], host).toBe(petIP);
    }
    // And the pod answers there, by that name
    expect((await fetchFromPod(client, `http://${pet}.${svcName}:8080/`)).pod).toBe(pet);
    // And a hostname no endpoint carries is NXDOMAIN: the other pod's (its subdomain is another Service), an unknown
    // one; the other pod is named by its dashed IP instead (endpointHostname)
    const resolver = new Resolver({ timeout: 2000, tries: 2 });
    resolver.setServers([cluster.nodeIP]);
    for (const host of [stranger, 'web-9']) {
      await expect(resolver.resolve4(`${host}.${svcName}.default.svc.cluster.local`), host).rejects.toMatchObject({
        code: 'ENOTFOUND',
      });
    }
    expect((await lookup(`${stranger}.${svcName}`)).exitCode).toBe(2);
    expect(await resolver.resolve4(`${strangerIP.replace(/\./g, '-')}.${svcName}.default.svc.cluster.local`)).toEqual([
      strangerIP,
    ]);
  });

  it('publishes a not-ready pod’s address as ready when the Service sets publishNotReadyAddresses', async () => {
    // Given a pod that never turns ready (its readiness probe dials a port nothing listens on) whose subdomain names a
    // headless Service with spec.publishNotReadyAddresses, as a StatefulSet's peer-discovery Service does, and a second
    // headless Service over the same pod without the field
    const app = `unready-${randomBytes(2).toString('hex')}`;
    const published = `${app}-peers`;
    const plain = `${app}-plain`;
    for (const [name, publish] of [
      [published, true],
      [plain, false],
    ] as const)
      await core.createNamespacedService({
        namespace: 'default',
        body: {
          metadata: { name },
          spec: {
            clusterIP: 'None',
            selector: { app },
            ports: [{ name: 'http', port: 8080 }],
            ...(publish ? { publishNotReadyAddresses: true } : {}),
          },
        },
      });
    const pod = `${app}-0`;
    await core.createNamespacedPod({
      namespace: 'default',
      body: {
        metadata: { name: pod, labels: { app } },
        spec: {
          hostname: pod,
          subdomain: published,
          containers: [
            {
              name: 'echo',
              image: 'devop.test/http-echo',
              ports: [{ name: 'http', containerPort: 8080 }],
              readinessProbe: { tcpSocket: { port: 9 }, periodSeconds: 1 },
            },
          ],
        },
      },
    });
    const podIP = (await waitForPod(core, pod, 'an IP', (p) => Boolean(p.status?.podIP))).status!.podIP!;
    const subsetOf = async (svc: string) =>
      (await core.readNamespacedEndpoints({ namespace: 'default', name: svc }).catch(() => undefined))?.subsets?.[0];
    // When the endpoints controller has seen the pod (not ready: the plain Service lists it as notReadyAddresses)
    const notReady = await waitFor('the pod in the plain Service’s notReadyAddresses', async () => {
      const s = await subsetOf(plain);
      return s?.notReadyAddresses?.length === 1 ? s : undefined;
    });
    expect(notReady.addresses).toBeUndefined();
    expect(notReady.notReadyAddresses?.[0].ip).toBe(podIP);
    // Then the publishing Service lists it in addresses, with its hostname (kubernetes
    // pkg/controller/endpoint/endpoints_controller.go syncService → addEndpointSubset: tolerateUnreadyEndpoints =
    // spec.publishNotReadyAddresses puts the address in Addresses whatever IsPodReady says)
    const ready = await waitFor('the pod in the publishing Service’s addresses', async () => {
      const s = await subsetOf(published);
      return s?.addresses?.length === 1 ? s : undefined;
    });
    expect(ready.notReadyAddresses).toBeUndefined();
    expect(ready.addresses?.[0]).toMatchObject({ ip: podIP, hostname: pod });
    expect(isReady(await core.readNamespacedPod({ namespace: 'default', name: pod }))).toBe(false);
    // And the cluster DNS answers for it by the Service's name and by its hostname, as CoreDNS does from those
    // addresses (coredns plugin/kubernetes/kubernetes.go findServices), while the plain Service's name, a headless
    // Service without a ready endpoint, does not exist (findServices: errNoItems)
    const resolver = new Resolver({ timeout: 2000, tries: 2 });
    resolver.setServers([cluster.nodeIP]);
    expect(await resolver.resolve4(`${published}.default.svc.cluster.local`)).toEqual([podIP]);
    expect(await resolver.resolve4(`${pod}.${published}.default.svc.cluster.local`)).toEqual([podIP]);
    await expect(resolver.resolve4(`${plain}.default.svc.cluster.local`)).rejects.toMatchObject({ code: 'ENOTFOUND' });
  });

  it('answers a headless Service’s SRV name with one record per ready endpoint, by hostname or dashed IP', async () => {
    // Given a headless Service whose http port (80) targets the pods' 8080, and behind it a pod whose hostname and
    // subdomain name it and a pod without them, both ready; and a client pod
    const svcName = `srv-${randomBytes(2).toString('hex')}`;
    await core.createNamespacedService({
      namespace: 'default',
      body: {
        metadata: { name: svcName },
        spec: {
          clusterIP: 'None',
          selector: { app: svcName },
          ports: [{ name: 'http', port: 80, targetPort: 8080 }],
        },
      },
    });
    const pet = `${svcName}-0`;
    await core.createNamespacedPod({
      namespace: 'default',
      body: {
        metadata: { name: pet, labels: { app: svcName } },
        spec: {
          hostname: pet,
          subdomain: svcName,
          containers: [
            {
              name: 'echo',
              image: 'devop.test/http-echo',
              ports: [{ name: 'http', containerPort: 8080 }],
              readinessProbe: { tcpSocket: { port: 8080 }, periodSeconds: 1 },
            },
          ],
        },
      },
    });
    const plain = `${svcName}-x`;
    await echoPod(plain, svcName);
    const client = `${svcName}-client`;
    await echoPod(client, 'client');
    const petIP = (await waitForPod(core, pet, 'Ready', isReady)).status!.podIP!;
    const plainIP = (await waitForPod(core, plain, 'Ready', isReady)).status!.podIP!;
    await waitForPod(core, client, 'Ready', isReady);
    const zone = `${svcName}.default.svc.cluster.local`;
    await waitFor('both pods in the Service’s endpoints', async () => {
      const eps = await core.readNamespacedEndpoints({ namespace: 'default', name: svcName }).catch(() => undefined);
      return (eps?.subsets ?? []).flatMap((s) => s.addresses ?? []).length === 2 ? true : undefined;
    });
    // When the client pod asks its resolver (/etc/resolv.conf: the cluster DNS) for _http._tcp.<svc>
    const script =
      `require('dns').promises.resolveSrv('_http._tcp.${zone}').then((r) => console.log(JSON.stringify(r)), ` +
      `(e) => console.log(JSON.stringify({ error: e.code })))`;
    const out = await execOutput(
      await cluster.runtime!.exec({
        namespace: 'default',
        pod: client,
        command: [NODE, '-e', script],
        stdin: false,
        tty: false,
      }),
    );
    // Then there is one record per ready endpoint, named by its hostname or else its dashed IP, with the endpoint's
    // port (8080, not the Service's 80), as CoreDNS answers (coredns plugin/kubernetes/kubernetes.go findServices,
    // endpointHostname; plugin/backend_lookup.go SRV) and the DNS specification requires (kubernetes/dns
    // docs/specification.md 2.4.2: _<port>._<proto>.<service>.<ns>.svc.<zone> SRV … <port-number> <hostname>.…)
    const dashed = `${plainIP.replace(/\./g, '-')}.${zone}`;
    const records = JSON.parse(out.stdout) as { name: string }[];
    expect(records.sort((a, b) => a.name.localeCompare(b.name))).toEqual(
      [`${pet}.${zone}`, dashed]
        .sort()
        .map((name) => expect.objectContaining({ name, port: 8080, priority: 0, weight: 50 })),
    );
    // And each target resolves to its pod
    const resolver = new Resolver({ timeout: 2000, tries: 2 });
    resolver.setServers([cluster.nodeIP]);
    expect(await resolver.resolve4(`${pet}.${zone}`)).toEqual([petIP]);
    expect(await resolver.resolve4(dashed)).toEqual([plainIP]);
  });
});
