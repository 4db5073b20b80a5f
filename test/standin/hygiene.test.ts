// A stand-in cluster that starts, runs pods (with a port-forward relay and an exec) and stops leaves nothing behind:
// no container, task, snapshot, rootfs mount, netns, link, cgroup, iptables rule, /etc/netns file, state directory or
// process of its own (containerd itself stays: it is the machine's, as on a node).
import { randomBytes } from 'node:crypto';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, readlinkSync, statSync } from 'node:fs';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import { startCluster } from '../../standin/index.js';
import { ctr, ensureContainerd, INSTANCE_LABEL } from '../../standin/kubelet/containerd.js';
import { linkTag } from '../../standin/kubelet/network.js';
import { clusterDirs } from '../../standin/kubelet/stale.js';
import { execOutput, isReady, pidsOfContainer, waitForPod } from '../../testkit/pods.js';
import { waitFor } from '../../testkit/wait.js';

requireRoot('stand-in hygiene');

interface Footprint {
  containers: string[];
  tasks: string[];
  snapshots: string[];
  snapshotLabels: string[];
  mounts: string[];
  netns: string[];
  links: string[];
  cgroups: string[];
  iptables: string[];
  etcNetns: string[];
  stateDirs: string[];
}

const NOTHING: Footprint = {
  containers: [],
  tasks: [],
  snapshots: [],
  snapshotLabels: [],
  mounts: [],
  netns: [],
  links: [],
  cgroups: [],
  iptables: [],
  etcNetns: [],
  stateDirs: [],
};

/**
 * The cgroups of the instance in every hierarchy (cgroup v1 controllers and the v2 tree): its root, pods, containers.
 */
function cgroupsOf(instance: string): string[] {
  const found: string[] = [];
  const walk = (dir: string): void => {
    found.push(dir);
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      if (entry.isDirectory() && /^(pod[0-9a-f-]+|[0-9a-f]{64})$/.test(entry.name)) walk(`${dir}/${entry.name}`);
    }
  };
  for (const hierarchy of readdirSync('/sys/fs/cgroup')) {
    const root = `/sys/fs/cgroup/${hierarchy}/devop-standin/${instance}`;
    if (existsSync(root)) walk(root);
  }
  return found;
}

/** Snapshots whose labels name the instance. */
async function snapshotsLabelled(instance: string): Promise<string[]> {
  const keys = (await ctr(['snapshots', 'ls']))
    .split('\n')
    .slice(1)
    .map((l) => l.split(/\s+/)[0])
    .filter(Boolean);
  const labelled: string[] = [];
  for (const key of keys.filter((k) => k.startsWith('devop/'))) {
    const info = JSON.parse(await ctr(['snapshots', 'info', key]).catch(() => '{}')) as {
      Labels?: Record<string, string>;
    };
    if (info.Labels?.[INSTANCE_LABEL] === instance) labelled.push(key);
  }
  return labelled;
}

async function footprint(instance: string): Promise<Footprint> {
  const tag = linkTag(instance);
  const sh = (cmd: string, args: string[]) => execFileSync(cmd, args, { encoding: 'utf8' });
  const iptables = ['filter', 'nat'].flatMap((table) => sh('iptables-save', ['-t', table]).split('\n'));
  const containers = (await ctr(['containers', 'ls', '-q', `labels."${INSTANCE_LABEL}"==${instance}`]))
    .split('\n')
    .filter(Boolean);
  const tasks = (await ctr(['tasks', 'ls', '-q'])).split('\n').filter((id) => containers.includes(id));
  return {
    containers,
    tasks,
    snapshots: (await ctr(['snapshots', 'ls'])).split('\n').filter((l) => l.startsWith(`devop/${instance}/`)),
    snapshotLabels: await snapshotsLabelled(instance),
    mounts: readFileSync('/proc/self/mountinfo', 'utf8')
      .split('\n')
      .filter((l) => l.includes(`/devop-standin/${instance}/`)),
    netns: sh('ip', ['netns', 'list'])
      .split('\n')
      .filter((l) => l.includes(instance)),
    links: sh('ip', ['-o', 'link'])
      .split('\n')
      .filter((l) => l.includes(tag)),
    cgroups: cgroupsOf(instance),
    iptables: iptables.filter((l) => l.includes(tag)),
    etcNetns: existsSync('/etc/netns') ? readdirSync('/etc/netns').filter((d) => d.includes(instance)) : [],
    stateDirs: [
      `/run/devop-kubelet/${instance}`,
      `/var/lib/devop-kubelet/${instance}`,
      `/run/devop-standin/${instance}`,
      ...clusterDirs(instance),
    ].filter((d) => existsSync(d)),
  };
}

function alive(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

/** Processes inside any of the given network namespaces (by inode), or whose cgroup is under the instance's root. */
function processesOf(instance: string, netnsInodes: Set<number>): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const net = readlinkSync(`/proc/${entry}/ns/net`);
      const inode = Number(/\[(\d+)\]/.exec(net)?.[1]);
      const cgroup = readFileSync(`/proc/${entry}/cgroup`, 'utf8');
      if (netnsInodes.has(inode) || cgroup.includes(`/${instance}/`)) found.push(Number(entry));
    } catch {
      // exited while we looked
    }
  }
  return found;
}

describe('stand-in hygiene', () => {
  it(
    'stop() removes every container, snapshot, mount, netns, link, cgroup, iptables rule, file and process it ' +
      'made',
    async () => {
      // Given nothing of this instance exists
      const instance = `hy${randomBytes(3).toString('hex')}`;
      await ensureContainerd();
      expect(await footprint(instance)).toEqual(NOTHING);
      // When a cluster starts and runs pods, a port-forward dial and an exec
      const cluster = await startCluster({ instance });
      let during: Footprint;
      let inodes: Set<number>;
      const containerPids: number[] = [];
      try {
        const kc = new KubeConfig();
        kc.loadFromFile(cluster.kubeconfigPath);
        const core = kc.makeApiClient(CoreV1Api);
        for (const name of ['web', 'sleeper']) {
          await core.createNamespacedPod({
            namespace: 'default',
            body: {
              metadata: { name },
              spec: {
                containers: [
                  {
                    name: 'main',
                    image: name === 'web' ? 'devop.test/http-echo' : 'busybox',
                    command: name === 'web' ? undefined : ['sh', '-c', 'sleep 3600 & sleep 3600'],
                  },
                ],
              },
            },
          });
        }
        const web = await waitForPod(core, 'web', 'Ready', isReady);
        const sleeper = await waitForPod(core, 'sleeper', 'Running', (p) => p.status?.phase === 'Running');
        const socket = await waitForPod(core, 'web', 'dialable', () => true).then(async () => {
          for (;;) {
            try {
              return await cluster.runtime!.dialPod('default', 'web', 8080);
            } catch {
              await new Promise((r) => setTimeout(r, 50));
            }
          }
        });
        socket.destroy();
        const out = await execOutput(
          await cluster.runtime!.exec({
            namespace: 'default',
            pod: 'sleeper',
            command: ['sh', '-c', 'sleep 3600 & echo started'],
            stdin: false,
            tty: false,
          }),
        );
        expect(out.stdout).toBe('started\n');
        for (const pod of [web, sleeper])
          containerPids.push(...(await pidsOfContainer(pod.status!.containerStatuses![0].containerID!)));
        during = await footprint(instance);
        inodes = new Set(during.netns.map((l) => statSync(`/run/netns/${l.split(' ')[0]}`).ino));
      } finally {
        await cluster.stop();
      }
      // Then, while it ran, the footprint was visible to these checks (so the checks below can fail) …
      expect(during.containers.length).toBe(2);
      expect(during.tasks.length).toBe(2);
      expect(during.snapshots.length).toBe(2);
      expect(during.snapshotLabels.length).toBe(2);
      // Two rootfs snapshots, and each pod's UTS and IPC namespaces
      expect(during.mounts.filter((m) => m.includes('/rootfs/')).length).toBe(2);
      expect(during.mounts.filter((m) => m.includes('/pods/')).length).toBe(4);
      expect(during.netns.length).toBe(2);
      expect(during.links.length).toBe(3);
      // The instance's cgroup, its two pods' and their containers', in every hierarchy runc uses
      expect(during.cgroups.filter((c) => c.startsWith('/sys/fs/cgroup/memory/')).length).toBe(5);
      expect(during.iptables.length).toBeGreaterThan(0);
      expect(during.etcNetns.length).toBe(2);
      expect(during.stateDirs.length).toBe(4);
      expect(containerPids.length).toBeGreaterThanOrEqual(4);
      // … and after stop nothing of it is left
      expect(await footprint(instance)).toEqual(NOTHING);
      expect(processesOf(instance, inodes).filter(alive)).toEqual([]);
      // A killed process may stay a zombie until its parent (or init, for orphans) reaps it: that is not a leak.
      expect(containerPids.filter(alive)).toEqual([]);
    },
  );

  it('a pod whose sandbox cannot be made keeps no rootfs snapshot or mount, and has one once it runs', async () => {
    // Given a node whose next three pod network namespaces' names are taken by netns it did not make, so a pod's
    // sandbox fails three times while its container's rootfs is made beside it (its image is present)
    const instance = `hs${randomBytes(3).toString('hex')}`;
    await ensureContainerd();
    const taken = ['1', '2', '3'].map((n) => `dvk-${instance}-${n}`);
    for (const name of taken) execFileSync('ip', ['netns', 'add', name]);
    const cluster = await startCluster({ instance });
    try {
      const kc = new KubeConfig();
      kc.loadFromFile(cluster.kubeconfigPath);
      const core = kc.makeApiClient(CoreV1Api);
      // When a pod is created
      await core.createNamespacedPod({
        namespace: 'default',
        body: {
          metadata: { name: 'nosandbox' },
          spec: { containers: [{ name: 'main', image: 'busybox', command: ['sleep', '3600'] }] },
        },
      });
      // Then after its second FailedCreatePodSandBox (the kubelet retries each second) no snapshot or rootfs mount of
      // the instance exists: what was made for the container went with the failed sandbox
      const failures = async (): Promise<number> =>
        (await core.listNamespacedEvent({ namespace: 'default' })).items
          .filter((e) => e.involvedObject?.name === 'nosandbox' && e.reason === 'FailedCreatePodSandBox')
          .reduce((sum, e) => sum + (e.count ?? 1), 0);
      await waitFor('two sandbox failures', async () => (await failures()) >= 2, 20_000);
      const failing = await footprint(instance);
      expect(failing.snapshots).toEqual([]);
      expect(failing.mounts.filter((m) => m.includes('/rootfs/'))).toEqual([]);
      // … and once a sandbox is made the pod runs on exactly one snapshot, labelled, and mounted
      const pod = await waitForPod(core, 'nosandbox', 'Running', (p) => p.status?.phase === 'Running');
      expect(pod.status?.containerStatuses?.[0].state?.running).toBeDefined();
      const running = await footprint(instance);
      expect(running.snapshots.length).toBe(1);
      await waitFor('the snapshot labelled', async () => (await snapshotsLabelled(instance)).length === 1, 5_000);
      expect(running.mounts.filter((m) => m.includes('/rootfs/')).length).toBe(1);
      // … and the failed sandboxes' clean-up left the netns it had not made
      expect(taken.filter((name) => existsSync(`/run/netns/${name}`))).toEqual(taken);
    } finally {
      await cluster.stop();
      for (const name of taken) spawnSync('ip', ['netns', 'del', name], { stdio: 'ignore' });
    }
    expect(await footprint(instance)).toEqual(NOTHING);
  });

  it('a kubelet killed between a rootfs snapshot and its ctr run leaves nothing after the next start', async () => {
    // Given a cluster process killed (SIGKILL) with one rootfs snapshot prepared and one prepared and mounted, neither
    // run nor labelled yet
    const instance = `hp${randomBytes(3).toString('hex')}`;
    await ensureContainerd();
    const child = spawn(process.execPath, ['--import', 'tsx', 'test/standin/fixtures/killed-before-run.ts', instance], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    await new Promise<void>((resolve, reject) => {
      child.stdout!.on('data', (c: Buffer) => c.toString().includes('prepared') && resolve());
      child.once('exit', (code) => reject(new Error(`fixture exited early (${code})`)));
    });
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    const left = await footprint(instance);
    expect(left.snapshots.length).toBe(2);
    expect(left.snapshotLabels).toEqual([]);
    expect(left.mounts.filter((m) => m.includes('/rootfs/')).length).toBe(1);
    // When another cluster starts (and stops)
    const next = await startCluster();
    await next.stop();
    // Then nothing of the killed one is left: its snapshots are found by their key, which names the instance
    expect(await footprint(instance)).toEqual(NOTHING);
  });

  it('a cluster killed without stop() is cleared by the next cluster start', async () => {
    // Given a cluster process with a running pod, killed with SIGKILL (no stop() runs)
    const instance = `hk${randomBytes(3).toString('hex')}`;
    await ensureContainerd();
    const child = spawn(process.execPath, ['--import', 'tsx', 'test/standin/fixtures/killed-cluster.ts', instance], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    await new Promise<void>((resolve, reject) => {
      child.stdout!.on('data', (c: Buffer) => c.toString().includes('running') && resolve());
      child.once('exit', (code) => reject(new Error(`fixture exited early (${code})`)));
    });
    const left = await footprint(instance);
    const inodes = new Set(left.netns.map((l) => statSync(`/run/netns/${l.split(' ')[0]}`).ino));
    const orphans = processesOf(instance, inodes).filter(alive);
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    expect(left.netns.length).toBe(1);
    expect(left.containers.length).toBe(1);
    expect(left.cgroups.filter((c) => c.startsWith('/sys/fs/cgroup/memory/')).length).toBe(3);
    // (the container and the pod's port-forward relay; the relay ends with its parent, the container would not)
    expect(orphans.length).toBe(2);
    // When another cluster starts (and stops) — on a shared machine another run's start may get there first: same code

    const next = await startCluster();
    await next.stop();
    // Then nothing of the killed one is left
    expect(await footprint(instance)).toEqual(NOTHING);
    await waitFor('orphans reaped', () => processesOf(instance, inodes).filter(alive).length === 0, 10_000);
  });
});
