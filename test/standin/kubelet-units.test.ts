// The kubelet's pure parts, without root: image references, the container spec and user, capabilities, env building,
// DNS answers and the ClusterIP rule set.
import type { CoreV1Event, V1Endpoints, V1Pod, V1Service, V1ServicePort } from '@kubernetes/client-node';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { normalizeImageRef, parseImageRef } from '../../standin/images.js';
import { chainID } from '../../standin/kubelet/containerd.js';
import {
  ALL_CAPABILITIES,
  containerCapabilities,
  containerSpec,
  DEFAULT_CAPABILITIES,
  parseQuantity,
  resolveUser,
  type ContainerSpecInput,
} from '../../standin/kubelet/oci-spec.js';
import { answerQuery, resolve, resolveName } from '../../standin/kubelet/dns.js';
import { EventCorrelator } from '../../standin/kubelet/event-recorder.js';
import {
  buildContainerEnv,
  EnvConfigError,
  expandRefs,
  serviceEnv,
  type EnvSources,
} from '../../standin/kubelet/env.js';
import { ServiceProxy } from '../../standin/kubelet/service-proxy.js';

const svc = (name: string, ns: string, clusterIP: string, ports: V1ServicePort[]): V1Service => ({
  metadata: { name, namespace: ns },
  spec: { clusterIP, ports },
});

/** A DNS name at offset in msg, following compression pointers, and the offset after it. */
function readName(msg: Buffer, offset: number): [string, number] {
  const labels: string[] = [];
  let at = offset;
  let end: number | undefined;
  while (msg[at] !== 0) {
    if (msg[at] >= 0xc0) {
      end ??= at + 2;
      at = msg.readUInt16BE(at) & 0x3fff;
      continue;
    }
    labels.push(msg.subarray(at + 1, at + 1 + msg[at]).toString('latin1'));
    at += 1 + msg[at];
  }
  return [labels.join('.'), end ?? at + 1];
}

/** count records from offset: owner, type and the data as text (A: the address; SRV: priority weight port target). */
function readRecords(msg: Buffer, offset: number, count: number): { name: string; type: number; data: string }[] {
  const out: { name: string; type: number; data: string }[] = [];
  let at = offset;
  for (let i = 0; i < count; i++) {
    const [name, next] = readName(msg, at);
    const type = msg.readUInt16BE(next);
    const rdata = msg.subarray(next + 10, next + 10 + msg.readUInt16BE(next + 8));
    const data =
      type === 33
        ? `${rdata.readUInt16BE(0)} ${rdata.readUInt16BE(2)} ${rdata.readUInt16BE(4)} ${readName(msg, next + 16)[0]}`
        : [...rdata].join('.');
    out.push({ name, type, data });
    at = next + 10 + rdata.length;
  }
  return out;
}

describe('image references', () => {
  it('normalizes names as Kubernetes does: docker.io/library/ for bare names, latest for a missing tag', () => {
    expect(parseImageRef('docker.io/library/busybox:1.36')).toEqual({ repository: 'busybox', tag: '1.36' });
    expect(parseImageRef('localhost:5000/x/y@sha256:ab')).toEqual({
      repository: 'localhost:5000/x/y',
      tag: 'sha256:ab',
    });
    expect(normalizeImageRef('busybox')).toBe('docker.io/library/busybox:latest');
    expect(normalizeImageRef('node:20-bookworm-slim')).toBe('docker.io/library/node:20-bookworm-slim');
    expect(normalizeImageRef('someone/app')).toBe('docker.io/someone/app:latest');
    expect(normalizeImageRef('devop.test/shell')).toBe('devop.test/shell:latest');
    expect(normalizeImageRef('ghcr.io/devop/agent:0.1.0')).toBe('ghcr.io/devop/agent:0.1.0');
    expect(normalizeImageRef('localhost:5000/x@sha256:ab')).toBe('localhost:5000/x@sha256:ab');
  });

  it('names the top layer snapshot by its chain ID', () => {
    // The digests of a three-layer image and the snapshot key containerd 1.6 gave its top layer.
    const diffs = [
      'sha256:e85228a5dce8f37a597057e62e4c7a9a681dc1cedcbdae900f9af01dee8d4c55',
      'sha256:d40629b76688445e18c43a58c564527ae489baab8fa98484e0bac84366da92f7',
      'sha256:9a29eb20f1b0b46668a9982def66d88be15696b205d57a0d942af6675ae18e7b',
    ];
    expect(chainID(diffs)).toBe('sha256:88f396e9668272884ba2a944e23b1c9a9b55fa965b2fa2af1d39ed8c0be21dcf');
    expect(chainID(diffs.slice(0, 1))).toBe(diffs[0]);
  });
});

describe('container capabilities', () => {
  it("are Kubernetes' default set + add − drop; drop ALL empties it first; privileged has all", () => {
    expect(containerCapabilities({})).toEqual(DEFAULT_CAPABILITIES);
    const caps = containerCapabilities({ add: ['NET_ADMIN', 'SYS_PTRACE'], drop: ['MKNOD', 'NET_RAW'] });
    expect(caps).toContain('CAP_NET_ADMIN');
    expect(caps).toContain('CAP_SYS_PTRACE');
    expect(caps).not.toContain('CAP_MKNOD');
    expect(caps).not.toContain('CAP_NET_RAW');
    expect(caps).toHaveLength(DEFAULT_CAPABILITIES.length);
    expect(containerCapabilities({ drop: ['ALL'], add: ['NET_BIND_SERVICE'] })).toEqual(['CAP_NET_BIND_SERVICE']);
    expect(containerCapabilities({ privileged: true, drop: ['ALL'] })).toEqual(ALL_CAPABILITIES);
  });
});

const baseSpecInput: ContainerSpecInput = {
  rootfs: '/run/x/rootfs',
  argv: ['sleep', '1'],
  env: { PATH: '/bin', A: 'b=c' },
  cwd: '/app',
  uid: 1000,
  gid: 1000,
  utsPath: '/run/x/pods/dvk-a-1/uts',
  ipcPath: '/run/x/pods/dvk-a-1/ipc',
  netnsPath: '/run/netns/dvk-a-1',
  capabilities: DEFAULT_CAPABILITIES,
  privileged: false,
  readOnlyRootFilesystem: true,
  noNewPrivileges: false,
  cgroupsPath: '/devop-standin/a/0123',
  mounts: [{ source: '/etc/netns/dvk-a-1/hosts', destination: '/etc/hosts', readOnly: false }],
};

describe('container runtime spec', () => {
  const input = baseSpecInput;
  type Spec = {
    process: { args: string[]; env: string[]; user: object; capabilities: { effective: string[] } };
    root: { readonly: boolean };
    linux: { namespaces: Array<{ type: string; path?: string }>; maskedPaths?: string[]; cgroupsPath: string };
    mounts: Array<{ destination: string; options: string[] }>;
  };
  const spec = (over: Partial<ContainerSpecInput> = {}) => containerSpec({ ...input, ...over }) as unknown as Spec;

  it("joins the pod's net, UTS and IPC namespaces; its own PID namespace unless hostPID, or its target's", () => {
    expect(spec().linux.namespaces).toEqual([
      { type: 'ipc', path: '/run/x/pods/dvk-a-1/ipc' },
      { type: 'uts', path: '/run/x/pods/dvk-a-1/uts' },
      { type: 'mount' },
      { type: 'network', path: '/run/netns/dvk-a-1' },
      { type: 'pid' },
    ]);
    expect(spec({ pidNamespace: 'host' }).linux.namespaces.map((n) => n.type)).not.toContain('pid');
    expect(spec({ pidNamespace: '/proc/42/ns/pid' }).linux.namespaces).toContainEqual({
      type: 'pid',
      path: '/proc/42/ns/pid',
    });
    expect(spec({ ipcPath: 'host' }).linux.namespaces.map((n) => n.type)).not.toContain('ipc');
  });

  it('carries the process, user, read-only root, bind mounts and cgroup; privileged drops the masks', () => {
    const s = spec();
    expect(s.process).toMatchObject({
      args: ['sleep', '1'],
      env: ['PATH=/bin', 'A=b=c'],
      user: { uid: 1000, gid: 1000 },
    });
    expect(s.process.capabilities.effective).toEqual(DEFAULT_CAPABILITIES);
    expect(s.root.readonly).toBe(true);
    expect(s.linux.cgroupsPath).toBe('/devop-standin/a/0123');
    expect(s.mounts.find((m) => m.destination === '/etc/hosts')?.options).toEqual(['rbind', 'rprivate', 'rw']);
    expect(s.mounts.find((m) => m.destination === '/sys')?.options).toContain('ro');
    expect(s.linux.maskedPaths).toContain('/proc/kcore');
    const p = spec({ privileged: true });
    expect(p.linux.maskedPaths).toBeUndefined();
    expect(p.mounts.find((m) => m.destination === '/sys')?.options).not.toContain('ro');
  });
});

describe('resource limits', () => {
  it('reads Kubernetes quantities and turns limits into a memory limit and a CFS quota', () => {
    expect(parseQuantity('256Mi')).toBe(256 * 2 ** 20);
    expect(parseQuantity('1G')).toBe(1e9);
    expect(parseQuantity('500m')).toBe(0.5);
    expect(parseQuantity('1.5')).toBe(1.5);
    expect(parseQuantity('2e3')).toBe(2000);
    expect(parseQuantity('lots')).toBeUndefined();
    const resources = (over: Partial<ContainerSpecInput>) =>
      (containerSpec({ ...baseSpecInput, ...over }) as { linux: { resources: Record<string, unknown> } }).linux
        .resources;
    expect(resources({ limits: { memoryBytes: 2 ** 20, cpuMillis: 250 } })).toMatchObject({
      memory: { limit: 2 ** 20, swap: 2 ** 20 },
      cpu: { quota: 25_000, period: 100_000 },
    });
    expect(resources({})).not.toHaveProperty('memory');
  });
});

describe('container user', () => {
  it("is runAsUser/runAsGroup, else the image's User looked up in its /etc/passwd and /etc/group, else root", () => {
    const rootfs = mkdtempSync(join(tmpdir(), 'devop-rootfs-'));
    try {
      mkdirSync(join(rootfs, 'etc'));
      writeFileSync(join(rootfs, 'etc', 'passwd'), 'root:x:0:0::/root:/bin/sh\nnode:x:1000:1000::/home/node:/bin/sh\n');
      writeFileSync(join(rootfs, 'etc', 'group'), 'root:x:0:\nnode:x:1000:\nstaff:x:50:\n');
      expect(resolveUser(rootfs, undefined)).toEqual({ uid: 0, gid: 0 });
      expect(resolveUser(rootfs, 'node')).toEqual({ uid: 1000, gid: 1000 });
      expect(resolveUser(rootfs, 'node:staff')).toEqual({ uid: 1000, gid: 50 });
      expect(resolveUser(rootfs, '1234:77')).toEqual({ uid: 1234, gid: 77 });
      expect(resolveUser(rootfs, 'node', 1234)).toEqual({ uid: 1234, gid: 0 });
      expect(resolveUser(rootfs, 'node', 1000, 5)).toEqual({ uid: 1000, gid: 5 });
      expect(() => resolveUser(rootfs, 'nobody-here')).toThrow(/unable to find user nobody-here/);
    } finally {
      rmSync(rootfs, { recursive: true, force: true });
    }
  });
});

describe('container env', () => {
  const sources: EnvSources = {
    configMap: async (_ns, name) => (name === 'cm' ? { data: { A: '1', B: '2' } } : undefined),
    secret: async (_ns, name) => (name === 's' ? { data: { pw: Buffer.from('x y').toString('base64') } } : undefined),
    services: () => [
      svc('redis-primary', 'default', '10.96.0.20', [{ name: 'tcp', port: 6379, protocol: 'TCP' }]),
      svc('headless', 'default', 'None', [{ port: 1 }]),
    ],
    masterService: () => svc('kubernetes', 'default', '10.96.0.1', [{ name: 'https', port: 443 }]),
  };
  const pod: V1Pod = {
    metadata: { name: 'p', namespace: 'default', labels: { tier: 'web' } },
    spec: { containers: [] },
  };

  it('orders service vars, envFrom, env, and expands $(VAR) references', async () => {
    const env = await buildContainerEnv(
      {
        pod,
        podIP: '10.244.0.5',
        hostIP: '10.244.0.1',
        hostname: 'p',
        container: {
          name: 'c',
          envFrom: [{ configMapRef: { name: 'cm' }, prefix: 'P_' }, { secretRef: { name: 's' } }],
          env: [
            { name: 'P_A', value: 'overridden' },
            { name: 'URL', value: 'redis://$(REDIS_PRIMARY_SERVICE_HOST):$(REDIS_PRIMARY_SERVICE_PORT)/$(NOPE)$$(X)' },
            { name: 'TIER', valueFrom: { fieldRef: { fieldPath: "metadata.labels['tier']" } } },
          ],
        },
      },
      sources,
    );
    expect(env).toMatchObject({
      P_A: 'overridden',
      P_B: '2',
      pw: 'x y',
      TIER: 'web',
      HOSTNAME: 'p',
      KUBERNETES_SERVICE_HOST: '10.96.0.1',
      KUBERNETES_SERVICE_PORT_HTTPS: '443',
    });
    expect(env.URL).toBe('redis://10.96.0.20:6379/$(NOPE)$(X)');
    expect(Object.keys(env).some((k) => k.startsWith('HEADLESS_'))).toBe(false);
  });

  it('names a missing configmap key as kubelet does, and skips optional ones', async () => {
    const ctx = (optional: boolean) => ({
      pod,
      podIP: '',
      hostIP: '',
      hostname: '',
      container: {
        name: 'c',
        env: [{ name: 'X', valueFrom: { configMapKeyRef: { name: 'cm', key: 'missing', optional } } }],
      },
    });
    await expect(buildContainerEnv(ctx(false), sources)).rejects.toThrow(
      new EnvConfigError("couldn't find key missing in ConfigMap default/cm"),
    );
    expect((await buildContainerEnv(ctx(true), sources)).X).toBeUndefined();
  });

  it('writes the docker-link variables of every port', () => {
    const env = serviceEnv(
      svc('my-db', 'default', '10.96.0.7', [
        { name: 'pg', port: 5432 },
        { port: 53, protocol: 'UDP' },
      ]),
    );
    expect(env).toEqual({
      MY_DB_SERVICE_HOST: '10.96.0.7',
      MY_DB_SERVICE_PORT: '5432',
      MY_DB_SERVICE_PORT_PG: '5432',
      MY_DB_PORT: 'tcp://10.96.0.7:5432',
      MY_DB_PORT_5432_TCP: 'tcp://10.96.0.7:5432',
      MY_DB_PORT_5432_TCP_PROTO: 'tcp',
      MY_DB_PORT_5432_TCP_PORT: '5432',
      MY_DB_PORT_5432_TCP_ADDR: '10.96.0.7',
      MY_DB_PORT_53_UDP: 'udp://10.96.0.7:53',
      MY_DB_PORT_53_UDP_PROTO: 'udp',
      MY_DB_PORT_53_UDP_PORT: '53',
      MY_DB_PORT_53_UDP_ADDR: '10.96.0.7',
    });
    expect(expandRefs('$(A)-$(B)', { A: 'x' })).toBe('x-$(B)');
  });
});

describe('cluster DNS answers', () => {
  const endpoints: V1Endpoints = { subsets: [{ addresses: [{ ip: '10.244.0.8' }, { ip: '10.244.0.9' }] }] };
  const data = {
    domain: 'cluster.local',
    service: (ns: string, name: string) =>
      ns === 'default' && name === 'web'
        ? svc('web', 'default', '10.96.0.30', [{ name: 'http', port: 80 }])
        : ns === 'default' && name === 'db'
          ? svc('db', 'default', 'None', [{ port: 5432 }])
          : undefined,
    endpoints: (_ns: string, name: string) => (name === 'db' ? endpoints : undefined),
  };

  it('resolves Services, headless endpoints, pods and SRV; NXDOMAIN or NODATA otherwise', () => {
    expect(resolveName('web.default.svc.cluster.local', 1, data)).toEqual([{ type: 'A', ip: '10.96.0.30' }]);
    expect(resolveName('db.default.svc.cluster.local', 1, data)).toEqual([
      { type: 'A', ip: '10.244.0.8' },
      { type: 'A', ip: '10.244.0.9' },
    ]);
    expect(resolveName('10-244-0-8.default.pod.cluster.local', 1, data)).toEqual([{ type: 'A', ip: '10.244.0.8' }]);
    expect(resolveName('_http._tcp.web.default.svc.cluster.local', 33, data)).toEqual([
      { type: 'SRV', port: 80, weight: 100, target: 'web.default.svc.cluster.local' },
    ]);
    expect(resolveName('web.default.svc.cluster.local', 28, data)).toEqual([]);
    expect(resolveName('web.other.svc.cluster.local', 1, data)).toBeUndefined();
    expect(resolveName('example.com', 1, data)).toBeUndefined();
  });

  it('names a ready endpoint by its hostname (and twin), else by its dashed IP; NXDOMAIN for other names', () => {
    // Given a dual-stack headless Service whose ready endpoints are a pod with hostname web-0 (its subdomain is the
    // Service) and one without, a not-ready web-1, and a ClusterIP Service — answered as CoreDNS
    // plugin/kubernetes/kubernetes.go does (findServices, endpointHostname)
    const peers: V1Service = {
      metadata: { name: 'web', namespace: 'db' },
      spec: { clusterIP: 'None', ipFamilies: ['IPv4', 'IPv6'], ports: [{ port: 80 }] },
    };
    const twins: Record<string, string> = { '10.244.0.8': 'fd00:10:244::8', '10.244.0.9': 'fd00:10:244::9' };
    const peerData = {
      domain: 'cluster.local',
      service: (ns: string, name: string) => (ns === 'db' && name === 'web' ? peers : data.service(ns, name)),
      endpoints: (ns: string, name: string): V1Endpoints | undefined =>
        ns === 'db' && name === 'web'
          ? {
              subsets: [
                {
                  addresses: [{ ip: '10.244.0.8', hostname: 'web-0' }, { ip: '10.244.0.9' }],
                  notReadyAddresses: [{ ip: '10.244.0.10', hostname: 'web-1' }],
                },
              ],
            }
          : ns === 'default' && name === 'web'
            ? { subsets: [{ addresses: [{ ip: '10.244.0.7' }] }] }
            : data.endpoints(ns, name),
      twin: (ip: string) => twins[ip],
    };
    const ask = (name: string, type: number) => resolveName(`${name}.cluster.local`, type, peerData);
    // Then the hostname names the pod's address of each family
    expect(ask('web-0.web.db.svc', 1)).toEqual([{ type: 'A', ip: '10.244.0.8' }]);
    expect(ask('web-0.web.db.svc', 28)).toEqual([{ type: 'AAAA', ip: 'fd00:10:244::8' }]);
    // And an endpoint without a hostname is named by its dashed IP, each family by its own
    expect(ask('10-244-0-9.web.db.svc', 1)).toEqual([{ type: 'A', ip: '10.244.0.9' }]);
    expect(ask('fd00-10-244--9.web.db.svc', 28)).toEqual([{ type: 'AAAA', ip: 'fd00:10:244::9' }]);
    expect(ask('fd00-10-244--9.web.db.svc', 1)).toEqual([]);
    // And other names are NXDOMAIN: an unknown hostname, a not-ready pod, the dashed IP of a pod that has a hostname,
    // a Service that does not exist; other record types of a known name are NODATA
    expect(ask('web-2.web.db.svc', 1)).toBeUndefined();
    expect(ask('web-1.web.db.svc', 1)).toBeUndefined();
    expect(ask('10-244-0-8.web.db.svc', 1)).toBeUndefined();
    expect(ask('web-0.nope.db.svc', 1)).toBeUndefined();
    expect(ask('web-0.web.db.svc', 33)).toEqual([]);
    // And a ClusterIP Service's endpoints are named too (CoreDNS answers an endpoint name for any Service)
    expect(ask('10-244-0-7.web.default.svc', 1)).toEqual([{ type: 'A', ip: '10.244.0.7' }]);
  });

  it('answers a headless Service’s SRV name with one record per ready endpoint, its address in the additional section', () => {
    // Given a dual-stack headless Service whose ready endpoints are web-0 (hostname) and a pod without a hostname, both
    // serving http on 8080 and metrics on 9090, a not-ready web-1; and a dual-stack ClusterIP Service
    const peers: V1Service = {
      metadata: { name: 'web', namespace: 'db' },
      spec: {
        clusterIP: 'None',
        ipFamilies: ['IPv4', 'IPv6'],
        ports: [
          { name: 'http', port: 80, targetPort: 8080 },
          { name: 'metrics', port: 9090 },
        ],
      },
    };
    const front: V1Service = {
      metadata: { name: 'front', namespace: 'db' },
      spec: {
        clusterIP: '10.96.0.40',
        clusterIPs: ['10.96.0.40', 'fd00:10:96::40'],
        ipFamilies: ['IPv4', 'IPv6'],
        ports: [{ name: 'http', port: 80 }],
      },
    };
    const twins: Record<string, string> = { '10.244.0.8': 'fd00:10:244::8', '10.244.0.9': 'fd00:10:244::9' };
    const ports = [
      { name: 'http', port: 8080, protocol: 'TCP' },
      { name: 'metrics', port: 9090, protocol: 'TCP' },
    ];
    const srvData = {
      domain: 'cluster.local',
      service: (ns: string, name: string) => (ns !== 'db' ? undefined : name === 'web' ? peers : front),
      endpoints: (ns: string, name: string): V1Endpoints | undefined =>
        ns === 'db' && name === 'web'
          ? {
              subsets: [
                {
                  addresses: [{ ip: '10.244.0.8', hostname: 'web-0' }, { ip: '10.244.0.9' }],
                  notReadyAddresses: [{ ip: '10.244.0.10', hostname: 'web-1' }],
                  ports,
                },
              ],
            }
          : undefined,
      twin: (ip: string) => twins[ip],
    };
    // When its _http._tcp name is asked for SRV
    const found = resolve('_http._tcp.web.db.svc.cluster.local', 33, srvData)!;
    // Then each ready endpoint is a target named by its hostname, else its dashed IP (each family's own), with the
    // endpoint's port; a hostname's twin shares its record; weight 100 shared out over the four addresses (coredns
    // plugin/kubernetes/kubernetes.go findServices, endpointHostname; plugin/backend_lookup.go SRV; kubernetes/dns
    // docs/specification.md 2.4.2)
    const zone = 'web.db.svc.cluster.local';
    expect(found.answers).toEqual([
      { type: 'SRV', port: 8080, weight: 25, target: `web-0.${zone}` },
      { type: 'SRV', port: 8080, weight: 25, target: `10-244-0-9.${zone}` },
      { type: 'SRV', port: 8080, weight: 25, target: `fd00-10-244--9.${zone}` },
    ]);
    // And the targets' A and AAAA records are in the additional section
    expect(found.additional).toEqual([
      { type: 'A', ip: '10.244.0.8', name: `web-0.${zone}` },
      { type: 'AAAA', ip: 'fd00:10:244::8', name: `web-0.${zone}` },
      { type: 'A', ip: '10.244.0.9', name: `10-244-0-9.${zone}` },
      { type: 'AAAA', ip: 'fd00:10:244::9', name: `fd00-10-244--9.${zone}` },
    ]);
    // And another port name gives that port; A and AAAA of the SRV name are the addresses themselves
    expect(resolveName('_metrics._tcp.web.db.svc.cluster.local', 33, srvData)?.[0]).toMatchObject({ port: 9090 });
    expect(resolveName('_http._tcp.web.db.svc.cluster.local', 1, srvData)).toEqual([
      { type: 'A', ip: '10.244.0.8' },
      { type: 'A', ip: '10.244.0.9' },
    ]);
    // And an unknown port or protocol is NXDOMAIN, and so is a headless Service without a ready endpoint, by either
    // name (findServices leaves errNoItems when it lists nothing)
    expect(resolve('_grpc._tcp.web.db.svc.cluster.local', 33, srvData)).toBeUndefined();
    expect(resolve('_http._udp.web.db.svc.cluster.local', 33, srvData)).toBeUndefined();
    const drained = { ...srvData, endpoints: (): V1Endpoints => ({ subsets: [{ notReadyAddresses: [], ports }] }) };
    expect(resolve('_http._tcp.web.db.svc.cluster.local', 33, drained)).toBeUndefined();
    expect(resolve('web.db.svc.cluster.local', 1, drained)).toBeUndefined();
    // And a ClusterIP Service keeps one record naming the Service, its ClusterIPs additional (weight: two entries)
    expect(resolve('_http._tcp.front.db.svc.cluster.local', 33, srvData)).toEqual({
      answers: [{ type: 'SRV', port: 80, weight: 50, target: 'front.db.svc.cluster.local' }],
      additional: [
        { type: 'A', ip: '10.96.0.40', name: 'front.db.svc.cluster.local' },
        { type: 'AAAA', ip: 'fd00:10:96::40', name: 'front.db.svc.cluster.local' },
      ],
    });
  });

  it('writes an SRV answer’s additional records under their own names, and fits a UDP answer into 512 bytes', () => {
    // Given a headless Service with two ready endpoints, one named by hostname
    const many = (n: number) => ({
      domain: 'cluster.local',
      service: () => svc('db', 'default', 'None', [{ name: 'pg', port: 5432 }]),
      endpoints: (): V1Endpoints => ({
        subsets: [
          {
            addresses: Array.from({ length: n }, (_, i) => ({ ip: `10.244.1.${i + 1}`, hostname: `db-${i}` })),
            ports: [{ name: 'pg', port: 5432, protocol: 'TCP' }],
          },
        ],
      }),
    });
    const qname = Buffer.concat(
      ['_pg', '_tcp', 'db', 'default', 'svc', 'cluster', 'local']
        .map((l) => Buffer.concat([Buffer.from([l.length]), Buffer.from(l)]))
        .concat([Buffer.from([0])]),
    );
    const query = Buffer.concat([
      Buffer.from('432101000001000000000000', 'hex'),
      qname,
      Buffer.from('00210001', 'hex'),
    ]);
    // When the SRV query is answered
    const reply = answerQuery(query, many(2))!;
    // Then the header counts two answers and two additional records, and the message reads back as such
    expect([reply.readUInt16BE(6), reply.readUInt16BE(8), reply.readUInt16BE(10)]).toEqual([2, 0, 2]);
    const records = readRecords(reply, 12 + qname.length + 4, 4);
    expect(records.slice(0, 2)).toEqual([
      { name: '_pg._tcp.db.default.svc.cluster.local', type: 33, data: '0 50 5432 db-0.db.default.svc.cluster.local' },
      { name: '_pg._tcp.db.default.svc.cluster.local', type: 33, data: '0 50 5432 db-1.db.default.svc.cluster.local' },
    ]);
    expect(records.slice(2)).toEqual([
      { name: 'db-0.db.default.svc.cluster.local', type: 1, data: '10.244.1.1' },
      { name: 'db-1.db.default.svc.cluster.local', type: 1, data: '10.244.1.2' },
    ]);
    // And over UDP (512 bytes) seven endpoints keep their answers and the one additional record that fits,
    // twelve keep the eight answers that fit with TC set (the client asks again over TCP, where all of them fit), as
    // CoreDNS's request.Scrub truncates (miekg/dns Truncate)
    const counts = (reply: Buffer) => [
      reply.length <= 512,
      reply.readUInt16BE(2) & 0x0200,
      reply.readUInt16BE(6),
      reply.readUInt16BE(10),
    ];
    expect(counts(answerQuery(query, many(7), 512)!)).toEqual([true, 0, 7, 1]);
    expect(counts(answerQuery(query, many(12), 512)!)).toEqual([true, 0x0200, 8, 0]);
    expect(counts(answerQuery(query, many(12))!).slice(1)).toEqual([0, 12, 12]);
  });

  it('answers a wire-format query with the question echoed and a compressed A record', () => {
    const qname = Buffer.concat(
      ['web', 'default', 'svc', 'cluster', 'local']
        .map((l) => Buffer.concat([Buffer.from([l.length]), Buffer.from(l)]))
        .concat([Buffer.from([0])]),
    );
    const msg = Buffer.concat([Buffer.from('123401000001000000000000', 'hex'), qname, Buffer.from('00010001', 'hex')]);
    const reply = answerQuery(msg, data)!;
    expect(reply.readUInt16BE(0)).toBe(0x1234);
    expect(reply.readUInt16BE(2) & 0x800f).toBe(0x8000);
    expect(reply.readUInt16BE(6)).toBe(1);
    expect(reply.subarray(12, 12 + qname.length + 4)).toEqual(msg.subarray(12));
    expect([...reply.subarray(-4)]).toEqual([10, 96, 0, 30]);
    expect(answerQuery(Buffer.from([1, 2, 3]), data)!.readUInt16BE(2) & 0xf).toBe(1);
  });
});

describe('ClusterIP rules', () => {
  it('DNATs each Service port to its ready endpoints with random balancing, and rejects ports without endpoints', () => {
    const services = [
      svc('web', 'default', '10.96.5.10', [{ name: 'http', port: 80 }]),
      svc('none', 'default', '10.96.5.11', [{ port: 81 }]),
      svc('hl', 'default', 'None', [{ port: 1 }]),
    ];
    const eps: Record<string, V1Endpoints> = {
      web: {
        subsets: [
          {
            addresses: [{ ip: '10.244.5.2' }, { ip: '10.244.5.3' }],
            notReadyAddresses: [{ ip: '10.244.5.4' }],
            ports: [{ name: 'http', port: 8080 }],
          },
        ],
      },
    };
    const proxy = new ServiceProxy({
      tag: 'abc123',
      serviceCIDR: '10.96.5.0/24',
      services: () => services,
      endpoints: (_ns, name) => eps[name],
    });
    const { nat, filter, chains } = proxy.rules();
    expect(filter).toEqual(['-A DVK-abc123-REJ -d 10.96.5.11/32 -p tcp -m tcp --dport 81 -j REJECT']);
    expect(chains.size).toBe(3);
    expect(nat.filter((r) => r.startsWith('-A DVK-abc123-SVC '))).toEqual([
      expect.stringMatching(
        /^-A DVK-abc123-SVC -d 10\.96\.5\.10\/32 -p tcp -m tcp --dport 80 -j DVK-abc123-S-[0-9A-F]{10}$/,
      ),
    ]);
    expect(nat.filter((r) => r.includes('--probability'))).toEqual([
      expect.stringContaining('--probability 0.50000 -j DVK-abc123-E-'),
    ]);
    expect(nat.filter((r) => r.includes('DNAT')).map((r) => r.split('--to-destination ')[1])).toEqual([
      '10.244.5.2:8080',
      '10.244.5.3:8080',
    ]);
    expect(nat.join('\n')).not.toContain('10.244.5.4');
  });
});

// client-go tools/record/events_cache.go: EventAggregator (10 similar events in 10 minutes are combined) and
// eventLogger (a repeat bumps count and lastTimestamp of the Event first created, under its name).
describe('kubelet event recorder', () => {
  const event = (name: string, reason: string, message: string): CoreV1Event => ({
    metadata: { name, namespace: 'default' },
    involvedObject: { kind: 'Pod', apiVersion: 'v1', namespace: 'default', name: 'p', uid: 'u1' },
    type: 'Normal',
    reason,
    message,
    source: { component: 'kubelet', host: 'node' },
  });

  it('counts a repeated event on the Event first created, keeping its firstTimestamp', () => {
    // Given a recorder that has recorded one BackOff
    const recorder = new EventCorrelator();
    const t0 = new Date(1_000);
    expect(recorder.correlate(event('p.1', 'BackOff', 'Back-off pulling image "x"'), t0)).toMatchObject({
      event: { count: 1, firstTimestamp: t0, lastTimestamp: t0 },
    });
    // When the same event comes again under a new name
    const t1 = new Date(5_000);
    const again = recorder.correlate(event('p.2', 'BackOff', 'Back-off pulling image "x"'), t1);
    // Then it is a patch of the first one: count 2, first and last timestamps
    expect(again.event).toMatchObject({ metadata: { name: 'p.1' }, count: 2, firstTimestamp: t0, lastTimestamp: t1 });
    expect(again.patch).toEqual({ count: 2, lastTimestamp: t1, message: 'Back-off pulling image "x"' });
  });

  it('combines the tenth similar event (same reason, other message) and counts those after it', () => {
    // Given nine Failed events with nine messages
    const recorder = new EventCorrelator();
    for (let i = 0; i < 9; i++) expect(recorder.correlate(event(`p.${i}`, 'Failed', `m${i}`)).patch).toBeUndefined();
    // When a tenth and an eleventh come
    const tenth = recorder.correlate(event('p.9', 'Failed', 'm9'));
    const eleventh = recorder.correlate(event('p.10', 'Failed', 'm10'));
    // Then the tenth is created combined, and the eleventh counts on it
    expect(tenth.event.message).toBe('(combined from similar events): m9');
    expect(tenth.patch).toBeUndefined();
    expect(eleventh.event).toMatchObject({ metadata: { name: 'p.9' }, count: 2 });
    expect(eleventh.patch?.message).toBe('(combined from similar events): m10');
  });
});
