// The stand-in node's containers are real containerd containers: kubectl run works, a container has its image's root
// in a mount namespace of its own, Kubernetes' capability set (+ add − drop), its own PID namespace unless hostPID, the
// user of runAsUser, a read-only root when asked — as on a node with containerd's CRI plugin.
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import { CoreV1Api, KubeConfig, type V1Container, type V1PodSpec } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import { repoRoot } from '../../standin/images.js';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import {
  CONTAINERD_SOCKET,
  ImageStore,
  importImages,
  imagesDir,
  K8S_NAMESPACE,
  namespaceOf,
} from '../../standin/kubelet/containerd.js';
import { run } from '../../standin/kubelet/host.js';
import { buildImage } from '../../standin/kubelet/image-build.js';
import { ALL_CAPABILITIES, boundingCapabilities, DEFAULT_CAPABILITIES } from '../../standin/kubelet/oci-spec.js';
import { execOutput, readAll, removeImage, waitForPod } from '../../testkit/pods.js';
import { waitFor } from '../../testkit/wait.js';

requireRoot('stand-in kubelet: containers');

const runFile = promisify(execFile);
let cluster: ClusterHandle;
let core: CoreV1Api;
let home: string;

beforeAll(async () => {
  cluster = await startCluster();
  const kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfigPath);
  core = kc.makeApiClient(CoreV1Api);
  home = mkdtempSync(join(tmpdir(), 'devop-containers-'));
});

afterAll(async () => {
  await cluster?.stop();
  if (home) rmSync(home, { recursive: true, force: true });
});

function podName(prefix: string): string {
  return `${prefix}-${randomBytes(3).toString('hex')}`;
}

/** Starts a pod of one `main` container (busybox sleeping unless told otherwise) and waits until it runs. */
async function runPod(
  name: string,
  container: Partial<V1Container> = {},
  spec: Partial<V1PodSpec> = {},
): Promise<void> {
  const main: V1Container = { name: 'main', image: 'busybox', command: ['sleep', '3600'], ...container };
  await core.createNamespacedPod({
    namespace: 'default',
    body: { metadata: { name }, spec: { containers: [main], ...spec } },
  });
  await waitForPod(core, name, 'Running', (p) => p.status?.phase === 'Running');
}

async function exec(pod: string, command: string[], container?: string) {
  return execOutput(
    await cluster.runtime!.exec({ namespace: 'default', pod, container, command, stdin: false, tty: false }),
  );
}

/** The CapEff mask (/proc/<pid>/status) of a capability set. */
function capMask(caps: string[]): string {
  const mask = caps.reduce((m, cap) => m | (1n << BigInt(ALL_CAPABILITIES.indexOf(cap))), 0n);
  return mask.toString(16).padStart(16, '0');
}

async function capEff(pod: string, pid = 'self'): Promise<string> {
  const out = await exec(pod, ['sh', '-c', `grep CapEff /proc/${pid}/status`]);
  return out.stdout.trim().split(/\s+/)[1];
}

describe('stand-in containers', () => {
  it('kubectl run --image=devop.test/shell -- sleep 1 completes', async () => {
    const name = podName('run');
    const env = { ...process.env, KUBECONFIG: cluster.kubeconfigPath, HOME: home };
    await runFile('kubectl', ['run', name, '--image=devop.test/shell', '--restart=Never', '--', 'sleep', '1'], {
      env,
      timeout: 60_000,
    });
    const pod = await waitForPod(core, name, 'Succeeded', (p) => p.status?.phase === 'Succeeded');
    expect(pod.status!.containerStatuses![0].state!.terminated).toMatchObject({ exitCode: 0, reason: 'Completed' });
    expect(pod.status!.containerStatuses![0].imageID).toMatch(/^devop\.test\/shell@sha256:[0-9a-f]{64}$/);
  });

  it("has its image's files at its root, in a mount namespace of its own; host files via hostPath", async () => {
    // Given an image with a file the host does not have, and a host directory with a file the image does not have
    const marker = `/devop-image-marker-${randomBytes(3).toString('hex')}`;
    const image = await buildImage({
      from: 'devop.test/shell',
      ref: `devop.test/marker-${randomBytes(3).toString('hex')}`,
      files: { [marker]: 'from the image\n' },
    });
    try {
      const name = podName('root');
      await runPod(
        name,
        { image, volumeMounts: [{ name: 'host', mountPath: '/host' }] },
        { volumes: [{ name: 'host', hostPath: { path: home } }] },
      );
      const hostFile = join(home, 'on-the-host');
      writeFileSync(hostFile, 'from the host\n');
      // Then the container sees the image's file and not the host's root, the host file only under /host
      expect(existsSync(marker)).toBe(false);
      expect((await exec(name, ['cat', marker])).stdout).toBe('from the image\n');
      expect((await exec(name, ['cat', hostFile])).exitCode).not.toBe(0);
      expect((await exec(name, ['cat', '/host/on-the-host'])).stdout).toBe('from the host\n');
      // And its mount namespace is not the host's
      const ns = (await exec(name, ['readlink', '/proc/self/ns/mnt'])).stdout.trim();
      expect(ns).toMatch(/^mnt:\[\d+\]$/);
      expect(ns).not.toBe(readlinkSync('/proc/self/ns/mnt'));
    } finally {
      await removeImage(image);
    }
  });

  it('runs an image imported a moment ago, and what a re-import under the same name holds', async () => {
    // Given an image imported just now, and pods that may not pull (imagePullPolicy Never: an image the node does not
    // find is ErrImageNeverPull at once, with no retry to hide it)
    const ref = `devop.test/fresh-${randomBytes(3).toString('hex')}`;
    const build = (version: string) =>
      buildImage({ from: 'devop.test/shell', ref, files: { '/version': `${version}\n` } });
    const runVersion = async () => {
      const name = podName('fresh');
      await runPod(name, { image: ref, imagePullPolicy: 'Never' });
      return (await exec(name, ['cat', '/version'])).stdout;
    };
    try {
      // When a pod of it is created right after the import, then after a re-import with other files
      await build('one');
      const first = await runVersion();
      await build('two');
      const second = await runVersion();
      // Then each ran the image containerd held when it started: the kubelet's list of images (kept between starts,
      // dropped on containerd's /images events as containerd's CRI plugin does, internal/cri/server/events.go) is
      // neither missing a new image nor holding an old digest
      expect(first).toBe('one\n');
      expect(second).toBe('two\n');
    } finally {
      await removeImage(ref);
    }
  });

  it('finds an image whose /images/create event has not arrived yet', async () => {
    // Given the kubelet's image store with its list kept, and containerd's events heard but late (the event of the next
    // import still on its way)
    const lateEvents = { subscribed: true, onImagesChanged: () => undefined };
    const images = new ImageStore(lateEvents);
    expect(await images.resolve('devop.test/shell')).toBeDefined();
    const ref = `devop.test/late-${randomBytes(3).toString('hex')}`;
    try {
      // When an image is imported and a container of it starts before the event comes
      const image = await buildImage({ from: 'devop.test/shell', ref, files: { '/late': 'yes\n' } });
      // Then a name the kept list lacks is looked up again rather than called absent
      expect((await images.resolve(ref))?.ref).toBe(image);
    } finally {
      await removeImage(ref);
    }
  });

  it("has Kubernetes' default capabilities, plus add, minus drop; drop ALL leaves only what is added", async () => {
    const plain = podName('caps');
    const tuned = podName('capt');
    const minimal = podName('capm');
    await runPod(plain);
    await runPod(tuned, {
      securityContext: { capabilities: { add: ['NET_ADMIN', 'SYS_PTRACE'], drop: ['NET_RAW', 'MKNOD'] } },
    });
    await runPod(minimal, { securityContext: { capabilities: { drop: ['ALL'], add: ['NET_BIND_SERVICE'] } } });
    expect(await capEff(plain, '1')).toBe(capMask(DEFAULT_CAPABILITIES));
    expect(await capEff(plain, '1')).toBe('00000000a80425fb');
    const expected = [
      ...DEFAULT_CAPABILITIES.filter((c) => c !== 'CAP_NET_RAW' && c !== 'CAP_MKNOD'),
      'CAP_NET_ADMIN',
      'CAP_SYS_PTRACE',
    ];
    expect(await capEff(tuned, '1')).toBe(capMask(expected));
    expect(await capEff(minimal, '1')).toBe(capMask(['CAP_NET_BIND_SERVICE']));
    // An exec'd process gets the container's set too
    expect(await capEff(tuned)).toBe(capMask(expected));
  });

  it('has a PID namespace of its own, the host’s with hostPID, its target’s as an ephemeral container', async () => {
    const own = podName('pid');
    const host = podName('hpid');
    await runPod(own);
    await runPod(host, {}, { hostPID: true });
    const hostNs = readlinkSync('/proc/self/ns/pid');
    expect((await exec(own, ['readlink', '/proc/self/ns/pid'])).stdout.trim()).not.toBe(hostNs);
    // PID 1 of its namespace is its command
    expect((await exec(own, ['cat', '/proc/1/cmdline'])).stdout).toBe('sleep\u00003600\u0000');
    expect((await exec(host, ['readlink', '/proc/self/ns/pid'])).stdout.trim()).toBe(hostNs);
    // An ephemeral container with targetContainerName sees the target's processes
    const current = await core.readNamespacedPod({ namespace: 'default', name: own });
    await core.replaceNamespacedPodEphemeralcontainers({
      namespace: 'default',
      name: own,
      body: {
        ...current,
        spec: {
          ...current.spec!,
          ephemeralContainers: [
            { name: 'dbg', image: 'busybox', command: ['sleep', '3600'], targetContainerName: 'main' },
          ],
        },
      },
    });
    await waitForPod(core, own, 'ephemeral running', (p) =>
      Boolean(p.status?.ephemeralContainerStatuses?.[0]?.state?.running),
    );
    expect((await exec(own, ['cat', '/proc/1/cmdline'], 'dbg')).stdout).toBe('sleep\u00003600\u0000');
    expect((await exec(own, ['readlink', '/proc/self/ns/pid'], 'dbg')).stdout).toBe(
      (await exec(own, ['readlink', '/proc/self/ns/pid'])).stdout,
    );
  });

  it('execs with a terminal when asked (tty), in the container, with its exit code', async () => {
    const name = podName('tty');
    await runPod(name);
    const proc = await cluster.runtime!.exec({
      namespace: 'default',
      pod: name,
      command: ['sh', '-c', 'test -t 0 && test -t 1 && echo "tty $(cat /proc/1/cmdline | tr "\\0" " ")"; exit 3'],
      stdin: false,
      tty: true,
    });
    const out = await execOutput(proc);
    expect(out.stdout).toContain('tty sleep 3600');
    expect(out.exitCode).toBe(3);
  });

  it(
    "shares the pod's hostname (UTS) and IPC namespace between its containers, not their mount " + 'namespaces',
    async () => {
      const name = podName('share');
      await runPod(
        name,
        {},
        {
          hostname: 'custom-host',
          containers: [
            { name: 'a', image: 'busybox', command: ['sleep', '3600'] },
            { name: 'b', image: 'busybox', command: ['sleep', '3600'] },
          ],
        },
      );
      const ns = async (container: string, kind: string) =>
        (await exec(name, ['readlink', `/proc/self/ns/${kind}`], container)).stdout.trim();
      expect((await exec(name, ['hostname'], 'a')).stdout.trim()).toBe('custom-host');
      expect((await exec(name, ['hostname'], 'b')).stdout.trim()).toBe('custom-host');
      expect((await exec(name, ['cat', '/etc/hostname'], 'b')).stdout.trim()).toBe('custom-host');
      expect(await ns('a', 'uts')).toBe(await ns('b', 'uts'));
      expect(await ns('a', 'ipc')).toBe(await ns('b', 'ipc'));
      expect(await ns('a', 'ipc')).not.toBe(readlinkSync('/proc/self/ns/ipc'));
      expect(await ns('a', 'mnt')).not.toBe(await ns('b', 'mnt'));
    },
  );

  // kubernetes pkg/kubelet/kubelet_pods.go GeneratePodHostNameAndDomain and truncatePodHostnameIfNeeded: the pod name
  // (or spec.hostname) cut to 63 characters, then trailing '-' and '.' trimmed; containerd's CRI plugin
  // (container_create.go, sandbox_run_linux.go) gives that name as HOSTNAME and in /etc/hostname.
  it('cuts a pod name over 63 characters to a hostname as the kubelet does', async () => {
    // Given a pod whose name is 65 characters, its 62nd and 63rd a '-'
    const hostname = `long-${randomBytes(3).toString('hex')}-`.padEnd(61, 'x');
    const name = `${hostname}--ab`;

    // When it runs
    await runPod(name);

    // Then its hostname is the first 63 characters without the trailing '-', everywhere the pod sees it
    expect((await exec(name, ['hostname'])).stdout.trim()).toBe(hostname);
    expect((await exec(name, ['cat', '/etc/hostname'])).stdout.trim()).toBe(hostname);
    expect((await exec(name, ['sh', '-c', 'echo $HOSTNAME'])).stdout.trim()).toBe(hostname);
    expect((await exec(name, ['cat', '/etc/hosts'])).stdout).toMatch(new RegExp(`\\t${hostname}\\n`));
  });

  // kubernetes pkg/kubelet/kubelet_pods.go GeneratePodHostNameAndDomain (the domain <subdomain>.<ns>.svc.<cluster
  // domain>) and managedHostsFileContent; pkg/kubelet/util/util.go GetNodenameForKernel (setHostnameAsFQDN).
  it('names a pod with a subdomain by its FQDN in /etc/hosts, and as its hostname with setHostnameAsFQDN', async () => {
    // Given two pods of hostname `web` and subdomain `crew`, one of them with setHostnameAsFQDN
    const fqdn = 'web.crew.default.svc.cluster.local';
    const short = podName('sub');
    const full = podName('fqdn');

    // When they run
    await runPod(short, {}, { hostname: 'web', subdomain: 'crew' });
    await runPod(full, {}, { hostname: 'web', subdomain: 'crew', setHostnameAsFQDN: true });

    // Then both hosts files map the pod IP to the FQDN and the short name
    for (const name of [short, full])
      expect((await exec(name, ['cat', '/etc/hosts'])).stdout).toMatch(new RegExp(`\\t${fqdn}\\tweb\\n`));
    // And the first pod's kernel hostname is `web`, the second's the FQDN, as are HOSTNAME and /etc/hostname
    expect((await exec(short, ['sh', '-c', 'echo $(hostname) $HOSTNAME $(cat /etc/hostname)'])).stdout.trim()).toBe(
      'web web web',
    );
    expect((await exec(full, ['sh', '-c', 'echo $(hostname) $HOSTNAME $(cat /etc/hostname)'])).stdout.trim()).toBe(
      `${fqdn} ${fqdn} ${fqdn}`,
    );
  });

  it('does not make the sandbox of a pod whose FQDN is over 64 characters with setHostnameAsFQDN', async () => {
    // Given a pod whose hostname and domain make a 66-character FQDN, with setHostnameAsFQDN
    const name = podName('longfqdn');
    const spec = { hostname: 'h'.repeat(35), subdomain: 'crew', setHostnameAsFQDN: true };

    // When it is created
    await core.createNamespacedPod({
      namespace: 'default',
      body: { metadata: { name }, spec: { containers: [{ name: 'main', image: 'busybox' }], ...spec } },
    });

    // Then its sandbox fails with the kubelet's message naming the length
    const message = async (): Promise<string | undefined> =>
      (await core.listNamespacedEvent({ namespace: 'default' })).items.find(
        (e) => e.involvedObject.name === name && e.reason === 'FailedCreatePodSandBox',
      )?.message;
    await waitFor(`${name}'s FailedCreatePodSandBox event`, async () => (await message()) !== undefined, 10_000);
    expect(await message()).toContain('is too long (64 characters is the max, 66 characters requested)');
    await core.deleteNamespacedPod({ namespace: 'default', name, gracePeriodSeconds: 0 });
  });

  it('runs as runAsUser/runAsGroup, and cannot write a read-only root filesystem', async () => {
    const name = podName('user');
    await runPod(name, { securityContext: { runAsUser: 1234, runAsGroup: 5678, readOnlyRootFilesystem: true } });
    expect((await exec(name, ['id', '-u'])).stdout.trim()).toBe('1234');
    expect((await exec(name, ['id', '-g'])).stdout.trim()).toBe('5678');
    const write = await exec(name, ['sh', '-c', 'echo x > /written']);
    expect(write.exitCode).not.toBe(0);
    expect(write.stderr).toMatch(/Read-only file system/);
  });

  it('is held to its resource limits: memory (OOMKilled beyond it, exit 137) and CPU (a CFS quota)', async () => {
    const name = podName('lim');
    const limits = { memory: '64Mi', cpu: '500m' };
    await runPod(name, { resources: { limits } });
    const pod = await core.readNamespacedPod({ namespace: 'default', name });
    const id = pod.status!.containerStatuses![0].containerID!.replace('containerd://', '');
    const cgroup = (controller: string, file: string) =>
      readFileSync(
        `/sys/fs/cgroup/${controller}/devop-standin/${cluster.instance}/pod${pod.metadata!.uid}/${id}/${file}`,
        'utf8',
      ).trim();
    expect(cgroup('memory', 'memory.limit_in_bytes')).toBe(String(64 * 2 ** 20));
    expect(cgroup('cpu', 'cpu.cfs_quota_us')).toBe('50000');
    expect(cgroup('cpu', 'cpu.cfs_period_us')).toBe('100000');
    // A process that takes four times its limit at once is killed by the kernel, not let through. (One that creeps up
    // to it can thrash for minutes first: memcg reclaim keeps evicting and faulting back its code pages.)
    const hog = podName('hog');
    const grow = 'const a = Buffer.alloc(256 << 20, 1); console.log(a.length)';
    await core.createNamespacedPod({
      namespace: 'default',
      body: {
        metadata: { name: hog },
        spec: {
          restartPolicy: 'Never',
          containers: [
            { name: 'main', image: 'devop.test/shell', command: ['node', '-e', grow], resources: { limits } },
          ],
        },
      },
    });
    const ended = await waitForPod(core, hog, 'Failed', (p) => p.status?.phase === 'Failed');
    expect(ended.status!.containerStatuses![0].state!.terminated).toMatchObject({ exitCode: 137, reason: 'OOMKilled' });
  });

  it('is privileged when asked: every capability the node has, and the host’s devices', async () => {
    const name = podName('priv');
    await runPod(name, { securityContext: { privileged: true } });
    expect(await capEff(name, '1')).toBe(capMask(boundingCapabilities()));
    expect(await capEff(name, '1')).toBe(readFileSync('/proc/self/status', 'utf8').match(/^CapBnd:\s*(\S+)$/m)![1]);
    expect((await exec(name, ['test', '-e', '/dev/net/tun'])).exitCode).toBe(existsSync('/dev/net/tun') ? 0 : 1);
  });

  it('ends an attempt whose command is not in the image with StartError (128), as containerd reports it', async () => {
    const name = podName('nocmd');
    await core.createNamespacedPod({
      namespace: 'default',
      body: {
        metadata: { name },
        spec: {
          restartPolicy: 'Never',
          containers: [{ name: 'main', image: 'busybox', command: ['no-such-command'] }],
        },
      },
    });
    const pod = await waitForPod(core, name, 'Failed', (p) => p.status?.phase === 'Failed');
    expect(pod.status!.containerStatuses![0].state!.terminated).toMatchObject({ exitCode: 128, reason: 'StartError' });
    expect(pod.status!.containerStatuses![0].state!.terminated!.message).toContain(
      '"no-such-command": executable file not found in $PATH',
    );
  });

  it('a container that ends at once has started: its stdout and stderr are in the log, its events say Started', async () => {
    const names = [podName('fast'), podName('fast'), podName('fast')];
    for (const name of names) {
      await core.createNamespacedPod({
        namespace: 'default',
        body: {
          metadata: { name },
          spec: {
            restartPolicy: 'Never',
            containers: [{ name: 'main', image: 'busybox', command: ['sh', '-c', 'echo out; echo err >&2'] }],
          },
        },
      });
    }
    for (const name of names) {
      const pod = await waitForPod(core, name, 'Succeeded', (p) => p.status?.phase === 'Succeeded');
      expect(pod.status!.containerStatuses![0].state!.terminated).toMatchObject({ exitCode: 0, reason: 'Completed' });
      const log = await readAll(await cluster.runtime!.logs({ namespace: 'default', pod: name, follow: false }));
      expect(log.split('\n').sort()).toEqual(['', 'err', 'out']);
      // The kubelet writes its events one after another, apart from the pod's status (as a kubelet's recorder does):
      // the Started event may land after the status that says Succeeded.
      const reasons = async (): Promise<Array<string | undefined>> =>
        (await core.listNamespacedEvent({ namespace: 'default' })).items
          .filter((e) => e.involvedObject.name === name)
          .map((e) => e.reason);
      await waitFor(`${name}'s Started event`, async () => (await reasons()).includes('Started'), 5_000);
      expect(await reasons()).not.toContain('Failed');
    }
  });

  it("removes a deleted checkout's containerd namespace at the next start, and no other", async () => {
    // Given the namespaces of a checkout whose images directory is gone (with a container's rootfs snapshot left) and
    // of one that exists, and an unlabelled one
    const ctrIn = (ns: string, args: string[]) =>
      run('ctr', ['-a', CONTAINERD_SOCKET, '-n', ns, ...args], undefined, 30_000);
    const there = mkdtempSync(join(tmpdir(), 'devop-checkout-'));
    const gonePath = join(there, 'gone');
    const [gone, kept, unlabelled] = [gonePath, there, join(there, 'x')].map(namespaceOf);
    for (const [ns, path] of [
      [gone, gonePath],
      [kept, there],
    ]) {
      await ctrIn(ns, ['namespaces', 'create', ns, `devop.standin/images-dir=${path}`]);
      await ctrIn(ns, ['snapshots', 'prepare', `devop/test/${ns}`]);
    }
    await ctrIn(unlabelled, ['namespaces', 'create', unlabelled]);
    try {
      // When a stand-in starts (its node imports images)
      await importImages(imagesDir(repoRoot()));
      // Then only the gone checkout's namespace was removed, with its snapshot
      const names = (await ctrIn(K8S_NAMESPACE, ['namespaces', 'ls', '-q'])).split('\n');
      expect(names).not.toContain(gone);
      expect(names).toEqual(expect.arrayContaining([kept, unlabelled, K8S_NAMESPACE]));
    } finally {
      for (const ns of [kept, unlabelled]) {
        await ctrIn(ns, ['snapshots', 'rm', `devop/test/${ns}`]).catch(() => undefined);
        await ctrIn(ns, ['namespaces', 'rm', ns]).catch(() => undefined);
      }
      rmSync(there, { recursive: true, force: true });
    }
  });

  it('refuses to start a node without image archives, naming the fix', async () => {
    const empty = mkdtempSync(join(tmpdir(), 'devop-no-images-'));
    try {
      await expect(startCluster({ imagesDir: empty })).rejects.toThrow(/no container images in .*devop-no-images-/);
      await expect(startCluster({ imagesDir: empty })).rejects.toMatchObject({
        hint: expect.stringContaining('npm run images'),
      });
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
  });
});
