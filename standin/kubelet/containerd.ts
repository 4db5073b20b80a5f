// The machine's containerd, as on a node: one daemon (started on demand when its socket does not answer), containers in
// a namespace of the checkout's own, images imported once from its OCI archives (dist/images/*.oci.tar, or
// $DEVOP_IMAGES_DIR).
// Every stand-in instance names its snapshots and labels its containers with its instance, and removes all of its own.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, openSync, readdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { UserError } from '../../shared/errors.js';
import { normalizeImageRef, repoRoot } from '../images.js';
import { HostCommandError, run, runQuiet } from './host.js';

export const CONTAINERD_ROOT = '/var/lib/devop-standin/containerd';
const RUN_DIR = '/run/devop-standin';
export const CONTAINERD_SOCKET = join(RUN_DIR, 'containerd.sock');
/** The images directory this checkout's namespace is named after, and labelled with. */
const NAMESPACE_IMAGES_DIR = resolve(imagesDir(repoRoot()));
/**
 * The containerd namespace of this checkout's stand-ins, one per images directory (`k8s.io-<hash of its path>`): two
 * checkouts hold different builds under one reference (`ghcr.io/devop/agent:0.1.0`), and in one namespace each import
 * replaced the other's image — a pod then ran the other checkout's agent, or failed to start when containerd collected
 * the snapshots of the image it was starting on. `ctr -a /run/devop-standin/containerd.sock namespaces ls` lists them.
 */
export const K8S_NAMESPACE = namespaceOf(NAMESPACE_IMAGES_DIR);

/** The namespace of the images directory at `imagesPath`. */
export function namespaceOf(imagesPath: string): string {
  return `k8s.io-${createHash('sha256').update(imagesPath).digest('hex').slice(0, 10)}`;
}

/** Names the images directory a namespace belongs to: a namespace whose directory is gone is removed (importImages). */
const IMAGES_DIR_LABEL = 'devop.standin/images-dir';
/** The label that names a container's stand-in instance (clean-up finds a dead instance's containers by it). */
export const INSTANCE_LABEL = 'devop.standin/instance';
/** How long containerd may take to answer after it was started (a loaded machine). */
const DAEMON_START_MS = 30_000;
/** How long a running containerd may take to answer `ctr version` (a loaded machine). */
const DAEMON_ANSWER_MS = 10_000;
/** How long one process may wait for another that is starting the daemon or importing images. */
const LOCK_WAIT_S = 300;

/** A ctr call that takes longer means containerd is stuck (they take tens of ms); an import reads 100 MB archives. */
const CTR_TIMEOUT_MS = 60_000;
const IMPORT_TIMEOUT_MS = 600_000;

/** Runs `ctr` against the stand-in's containerd, in this checkout's namespace. */
export function ctr(args: string[], input?: string, timeoutMs = CTR_TIMEOUT_MS): Promise<string> {
  return run('ctr', ['-a', CONTAINERD_SOCKET, '-n', K8S_NAMESPACE, ...args], input, timeoutMs);
}

export function ctrQuiet(args: string[]): Promise<boolean> {
  return runQuiet('ctr', ['-a', CONTAINERD_SOCKET, '-n', K8S_NAMESPACE, ...args], CTR_TIMEOUT_MS);
}

/** The argv prefix of a long-running ctr command (run, tasks exec). */
export function ctrArgv(args: string[]): string[] {
  return ['ctr', '-a', CONTAINERD_SOCKET, '-n', K8S_NAMESPACE, ...args];
}

function needBinary(name: string): void {
  const found = (process.env.PATH ?? '').split(':').some((dir) => dir && existsSync(join(dir, name)));
  if (!found) {
    throw new UserError(
      `${name} is not installed: the stand-in node runs its containers through containerd and runc`,
      'install them (apt-get install containerd runc)',
    );
  }
}

/** Where a containerd of the stand-in keeps its socket, state, lock and log (runDir) and its content (root). */
export interface DaemonPaths {
  runDir: string;
  root: string;
}

/** The machine's: what every stand-in uses. */
export const MACHINE_DAEMON: DaemonPaths = { runDir: RUN_DIR, root: CONTAINERD_ROOT };

function daemonFiles(paths: DaemonPaths) {
  return {
    socket: join(paths.runDir, 'containerd.sock'),
    state: join(paths.runDir, 'containerd'),
    lock: join(paths.runDir, 'containerd.lock'),
    config: join(paths.runDir, 'containerd.toml'),
    log: join(paths.runDir, 'containerd.log'),
  };
}

/** Holds a lock (flock(1): released when this process ends, however it ends) while fn runs. */
async function withLock<T>(lockPath: string, fn: () => Promise<T>): Promise<T> {
  mkdirSync(dirname(lockPath), { recursive: true });
  const holder = spawn('flock', ['-w', String(LOCK_WAIT_S), lockPath, '-c', 'echo locked; exec cat'], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  await new Promise<void>((resolve, reject) => {
    holder.stdout.once('data', () => resolve());
    holder.once('exit', (code) =>
      reject(new Error(`could not take ${lockPath} within ${LOCK_WAIT_S} s (flock exited ${code})`)),
    );
    holder.once('error', reject);
  });
  try {
    return await fn();
  } finally {
    holder.stdin.end();
  }
}

async function answers(socket: string = CONTAINERD_SOCKET): Promise<boolean> {
  // A socket that does not answer within seconds is a daemon that is gone (or stuck): start one.
  return existsSync(socket) && runQuiet('ctr', ['-a', socket, 'version'], DAEMON_ANSWER_MS);
}

function daemonConfig(paths: DaemonPaths): string {
  const files = daemonFiles(paths);
  return `version = 2
root = "${paths.root}"
state = "${files.state}"
# The stand-in's kubelet drives containerd itself (ctr); the CRI plugin would want CNI and a kubelet of its own.
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "${files.socket}"
[plugins."io.containerd.internal.v1.opt"]
  path = "${paths.root}/opt"
`;
}

/**
 * Starts the machine's containerd unless its socket answers; processes starting at once start one daemon (the second
 * waits for the lock, then finds the socket answering). Resolves to the daemon's PID when this call started it.
 */
export async function ensureContainerd(paths: DaemonPaths = MACHINE_DAEMON): Promise<number | undefined> {
  needBinary('containerd');
  needBinary('runc');
  needBinary('ctr');
  const files = daemonFiles(paths);
  if (await answers(files.socket)) return undefined;
  return withLock(files.lock, async () => {
    if (await answers(files.socket)) return undefined;
    mkdirSync(paths.root, { recursive: true });
    mkdirSync(files.state, { recursive: true });
    writeFileSync(files.config, daemonConfig(paths));
    rmSync(files.socket, { force: true });
    const log = openSync(files.log, 'a');
    // The daemon outlives the test file that started it, as a node's does: the next one finds it answering.
    const daemon = spawn('containerd', ['--config', files.config], { detached: true, stdio: ['ignore', log, log] });
    daemon.unref();
    const deadline = Date.now() + DAEMON_START_MS;
    while (!(await answers(files.socket))) {
      if (daemon.exitCode !== null || Date.now() > deadline) {
        throw new UserError(`containerd did not start (socket ${files.socket})`, `see ${files.log}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    return daemon.pid;
  });
}

/** Where the image archives are: $DEVOP_IMAGES_DIR, else <repo>/dist/images. */
export function imagesDir(root: string): string {
  return process.env.DEVOP_IMAGES_DIR || join(root, 'dist', 'images');
}

interface ArchiveIndex {
  manifests?: Array<{ digest: string; annotations?: Record<string, string> }>;
}

/** Image name → manifest digest of what containerd holds in this checkout's namespace. */
async function storedImages(): Promise<Map<string, string>> {
  const out = await ctr(['images', 'ls']);
  const images = new Map<string, string>();
  for (const line of out.split('\n').slice(1)) {
    const [ref, , digest] = line.trim().split(/\s+/);
    if (ref && digest) images.set(ref, digest);
  }
  return images;
}

/**
 * Imports every archive of the directory whose images containerd does not hold at the same digest (a rebuilt archive
 * replaces its images; an unchanged one costs one `tar` read). Fails when the directory has no archive at all.
 */
export async function importImages(dir: string): Promise<void> {
  const archives = existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith('.oci.tar')) : [];
  if (archives.length === 0) {
    throw new UserError(
      `no container images in ${dir}: the stand-in node runs pods from OCI archives (*.oci.tar)`,
      'run npm run images (or point DEVOP_IMAGES_DIR at a directory of archives)',
    );
  }
  const wanted = async (stored: Map<string, string>): Promise<string[]> => {
    const missing: string[] = [];
    for (const archive of archives) {
      const index = JSON.parse(await run('tar', ['-xOf', join(dir, archive), 'index.json'])) as ArchiveIndex;
      const stale = (index.manifests ?? []).some((m) => {
        const name = m.annotations?.['org.opencontainers.image.ref.name'];
        return name !== undefined && stored.get(normalizeImageRef(name)) !== m.digest;
      });
      if (stale) missing.push(archive);
    }
    return missing;
  };
  const namespaces = await namespaceLabels();
  // A label read whole (its namespace's name is its hash) of a directory that no longer exists.
  const gone = [...namespaces].filter(
    ([name, path]) => name !== K8S_NAMESPACE && name === namespaceOf(path) && !existsSync(path),
  );
  const labelled = namespaces.get(K8S_NAMESPACE) === NAMESPACE_IMAGES_DIR;
  if ((await wanted(await storedImages())).length === 0 && gone.length === 0 && labelled) return;
  await withLock(daemonFiles(MACHINE_DAEMON).lock, async () => {
    for (const [name] of gone) await removeNamespace(name);
    for (const archive of await wanted(await storedImages())) {
      await ctr(['images', 'import', join(dir, archive)], undefined, IMPORT_TIMEOUT_MS);
    }
    if (!labelled) await ctr(['namespaces', 'label', K8S_NAMESPACE, `${IMAGES_DIR_LABEL}=${NAMESPACE_IMAGES_DIR}`]);
  });
}

/** The stand-in's namespaces (`k8s.io-<hash>`) → the images directory each belongs to ('' when not labelled). */
async function namespaceLabels(): Promise<Map<string, string>> {
  const out = await run('ctr', ['-a', CONTAINERD_SOCKET, 'namespaces', 'ls'], undefined, CTR_TIMEOUT_MS);
  const namespaces = new Map<string, string>();
  for (const line of out.split('\n').slice(1)) {
    const [name, labels = ''] = line.trim().split(/\s+/);
    if (!name || !/^k8s\.io-[0-9a-f]{10}$/.test(name)) continue;
    const label = labels.split(',').find((l) => l.startsWith(`${IMAGES_DIR_LABEL}=`));
    namespaces.set(name, label?.slice(IMAGES_DIR_LABEL.length + 1) ?? '');
  }
  return namespaces;
}

/**
 * Removes the namespace of a checkout whose images directory is gone (a deleted clone): its containers, the rootfs
 * snapshots they left, its leases and images (their snapshots, ~0.7 GB, and content no other namespace holds go with
 * them), then the namespace. What fails stays for the next start to try again.
 */
async function removeNamespace(ns: string): Promise<void> {
  const inNs = (args: string[]): Promise<string> =>
    run('ctr', ['-a', CONTAINERD_SOCKET, '-n', ns, ...args], undefined, CTR_TIMEOUT_MS);
  const names = async (args: string[]): Promise<string[]> =>
    (await inNs(args).catch(() => '')).split('\n').filter(Boolean);
  for (const id of await names(['tasks', 'ls', '-q'])) await inNs(['tasks', 'rm', '-f', id]).catch(() => undefined);
  const containers = await names(['containers', 'ls', '-q']);
  if (containers.length > 0) await inNs(['containers', 'rm', ...containers]).catch(() => undefined);
  const active = (await names(['snapshots', 'ls']))
    .slice(1)
    .map((line) => line.trim().split(/\s+/)) // KEY [PARENT] KIND
    .filter((columns) => columns.at(-1) === 'Active');
  for (const [key] of active) await inNs(['snapshots', 'rm', key]).catch(() => undefined);
  // A lease of an import cut short holds its content and snapshots for a day.
  const leases = await names(['leases', 'ls', '-q']);
  if (leases.length > 0) await inNs(['leases', 'rm', '--sync', ...leases]).catch(() => undefined);
  const images = await names(['images', 'ls', '-q']);
  if (images.length > 0) await inNs(['images', 'rm', '--sync', ...images]).catch(() => undefined);
  await inNs(['namespaces', 'rm', ns]).catch(() => undefined);
}

/** What the kubelet needs of an image: its config (entrypoint, cmd, env, workingDir, user) and its rootfs chain. */
export interface ImageInfo {
  ref: string;
  /** `<repository>@<manifest digest>`, as status.imageID shows it. */
  imageID: string;
  entrypoint: string[];
  cmd: string[];
  env: Record<string, string>;
  workingDir?: string;
  user?: string;
  /** The committed snapshot of the image's top layer (its chain ID): a container's rootfs is prepared on it. */
  chainID: string;
}

interface OciImageConfig {
  config?: {
    Entrypoint?: string[] | null;
    Cmd?: string[] | null;
    Env?: string[] | null;
    WorkingDir?: string;
    User?: string;
  };
  rootfs?: { diff_ids?: string[] };
}

/** The chain ID of a layer stack (OCI image spec): the name containerd gives the snapshot of the top layer. */
export function chainID(diffIDs: string[]): string {
  let chain = diffIDs[0] ?? '';
  for (const diff of diffIDs.slice(1))
    chain = `sha256:${createHash('sha256').update(`${chain} ${diff}`).digest('hex')}`;
  return chain;
}

/** Where containerd's content store keeps a blob: `<root>/io.containerd.content.v1.content/blobs/<alg>/<hex>`. */
const CONTENT_BLOBS = join(CONTAINERD_ROOT, 'io.containerd.content.v1.content', 'blobs');

/**
 * A blob of the content store (a manifest, an image config), read from its file as containerd's CRI plugin reads it
 * in-process — `ctr content get` is a Go process of its own per blob. Through ctr when the file is not there.
 */
async function contentBlob(digest: string): Promise<string> {
  const [algorithm, hex] = digest.split(':');
  if (algorithm && hex && /^[0-9a-f]+$/.test(hex)) {
    const blob = await readFile(join(CONTENT_BLOBS, algorithm, hex), 'utf8').catch(() => undefined);
    if (blob !== undefined) return blob;
  }
  return ctr(['content', 'get', digest]);
}

/** What keeps ImageStore's list of images true between container starts (containerd-events.ts). */
export interface ImageEvents {
  /** True while containerd's events are heard: a list taken now learns of every later change. */
  readonly subscribed: boolean;
  /** `listener` is called on every change of the namespace's images, and when the events stop being heard. */
  onImagesChanged(listener: () => void): void;
}

/**
 * Reads images from containerd (config and layers, by manifest digest), caching what does not change. The list of
 * images is kept while containerd's events are heard and dropped at each image event, as containerd's CRI plugin keeps
 * its image store (internal/cri/server/events.go): a container start asks no `ctr images ls`. A name the list lacks is
 * looked up again before it is called absent, so an image imported a moment ago (its event still on its way) is found.
 */
export class ImageStore {
  private readonly byDigest = new Map<string, ImageInfo>();
  private listed: Promise<Map<string, string>> | undefined;

  constructor(private readonly events?: ImageEvents) {
    events?.onImagesChanged(() => {
      this.listed = undefined;
    });
  }

  /** The list kept from an earlier call, while it may be trusted. */
  private kept(): Promise<Map<string, string>> | undefined {
    return this.events?.subscribed ? this.listed : undefined;
  }

  private list(): Promise<Map<string, string>> {
    const listing = storedImages();
    // Kept only while events are heard; an event during the listing drops it (it may predate the change).
    this.listed = this.events?.subscribed ? listing : undefined;
    listing.catch(() => {
      if (this.listed === listing) this.listed = undefined;
    });
    return listing;
  }

  /** The image as containerd has it, or undefined when it has no image of that (normalized) name. */
  async resolve(image: string): Promise<ImageInfo | undefined> {
    const ref = normalizeImageRef(image);
    const kept = this.kept();
    const digest = (kept && (await kept).get(ref)) ?? (await this.list()).get(ref);
    if (!digest) return undefined;
    const cached = this.byDigest.get(`${ref} ${digest}`);
    if (cached) return cached;
    const manifest = JSON.parse(await contentBlob(digest)) as { config: { digest: string } };
    const config = JSON.parse(await contentBlob(manifest.config.digest)) as OciImageConfig;
    const env: Record<string, string> = {};
    for (const pair of config.config?.Env ?? []) {
      const eq = pair.indexOf('=');
      if (eq > 0) env[pair.slice(0, eq)] = pair.slice(eq + 1);
    }
    const info: ImageInfo = {
      ref,
      imageID: `${ref.replace(/[:@][^/]*$/, '')}@${digest}`,
      entrypoint: config.config?.Entrypoint ?? [],
      cmd: config.config?.Cmd ?? [],
      env,
      workingDir: config.config?.WorkingDir || undefined,
      user: config.config?.User || undefined,
      chainID: chainID(config.rootfs?.diff_ids ?? []),
    };
    this.byDigest.set(`${ref} ${digest}`, info);
    return info;
  }
}

/** A pod's cgroup (relative to each hierarchy's root), as a kubelet makes `/kubepods/…/pod<uid>`. */
export function podCgroup(instance: string, podUid: string): string {
  return `/devop-standin/${instance}/pod${podUid}`;
}

/** The cgroup of one container, in its pod's: it ends in the container ID, as on a node. */
export function containerCgroup(instance: string, podUid: string, id: string): string {
  return `${podCgroup(instance, podUid)}/${id}`;
}

/** Removes a pod's cgroup in every hierarchy once its containers are gone (runc removes only theirs). */
export function removePodCgroup(instance: string, podUid: string): void {
  for (const hierarchy of cgroupHierarchies()) removeCgroupTree(join(hierarchy, podCgroup(instance, podUid)));
}

/** The instance's run directory: its helpers (container-logger, exec-reaper), rootfs mounts and pods' namespaces. */
export function instanceRunDir(instance: string): string {
  return join(RUN_DIR, instance);
}

/** Where a container's rootfs snapshot is mounted while it exists. */
export function rootfsDir(instance: string, id: string): string {
  return join(RUN_DIR, instance, 'rootfs', id);
}

/** Where a pod's UTS and IPC namespaces are kept (bind mounts) while the pod exists. */
export function podNamespacesDir(instance: string, netns: string): string {
  return join(RUN_DIR, instance, 'pods', netns);
}

export function snapshotKey(instance: string, id: string): string {
  return `devop/${instance}/${id}`;
}

/** Prepares a container's rootfs: a new snapshot on the image's layers, mounted at rootfsDir. */
export async function mountRootfs(instance: string, id: string, image: ImageInfo): Promise<string> {
  const key = snapshotKey(instance, id);
  const mounts = JSON.parse(await ctr(['snapshots', 'prepare', '--mounts', key, image.chainID])) as Array<{
    Type: string;
    Source: string;
    Options: string[];
  }>;
  const dir = rootfsDir(instance, id);
  try {
    mkdirSync(dir, { recursive: true });
    for (const m of mounts) await run('mount', ['-t', m.Type, '-o', m.Options.join(','), m.Source, dir]);
  } catch (err) {
    await removeRootfs(instance, id);
    throw err;
  }
  return dir;
}

/**
 * Labels a container's rootfs snapshot like the instance's containers, so that `ctr snapshots info` tells whose it is.
 * Clean-up finds a dead instance's snapshots by their key, which carries the instance (removeInstanceContainers), not
 * by this label: the start runs it beside `ctr run` rather than waiting for it (ctr 1.6 cannot label at prepare), and a
 * label that fails costs the container nothing.
 */
export function labelRootfs(instance: string, id: string): Promise<boolean> {
  return ctrQuiet(['snapshots', 'label', snapshotKey(instance, id), `${INSTANCE_LABEL}=${instance}`]);
}

/** Unmounts and removes a container's rootfs snapshot (safe to call twice). */
export async function removeRootfs(instance: string, id: string): Promise<void> {
  const dir = rootfsDir(instance, id);
  if (existsSync(dir)) {
    // A lazy unmount: a process still dying in the container may hold it for a moment.
    await runQuiet('umount', ['-l', dir]);
    try {
      rmdirSync(dir);
    } catch {
      // still mounted (the unmount failed): the instance's clean-up tries again
    }
  }
  await ctrQuiet(['snapshots', 'rm', snapshotKey(instance, id)]);
}

/** Cgroup hierarchies of the host: cgroup v1 controllers and/or the v2 tree (hybrid hosts have both). */
function cgroupHierarchies(): string[] {
  const roots: string[] = [];
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const fields = line.split(' ');
    const sep = fields.indexOf('-');
    if (sep > 0 && (fields[sep + 1] === 'cgroup' || fields[sep + 1] === 'cgroup2')) roots.push(fields[4]);
  }
  return roots;
}

function removeCgroupTree(dir: string): void {
  if (!existsSync(dir)) return;
  for (const child of readdirSync(dir, { withFileTypes: true })) {
    if (child.isDirectory()) removeCgroupTree(join(dir, child.name));
  }
  try {
    rmdirSync(dir);
  } catch {
    // a process still in it (the hygiene test reports what is left)
  }
}

/**
 * Removes every container, task, snapshot, rootfs mount and cgroup of an instance — its own on stop(), or what a killed
 * run left behind. Does nothing (and starts no daemon) when containerd is not running.
 */
export async function removeInstanceContainers(instance: string): Promise<void> {
  if (await answers()) {
    let ids: string[] = [];
    try {
      ids = (await ctr(['containers', 'ls', '-q', `labels."${INSTANCE_LABEL}"==${instance}`]))
        .split('\n')
        .filter(Boolean);
    } catch (err) {
      if (!(err instanceof HostCommandError)) throw err;
    }
    for (const id of ids) {
      await ctrQuiet(['tasks', 'kill', '-a', '-s', 'SIGKILL', id]);
      await ctrQuiet(['tasks', 'rm', '-f', id]);
      await ctrQuiet(['containers', 'rm', id]);
    }
  }
  const rootfsRoot = join(RUN_DIR, instance, 'rootfs');
  const ids = existsSync(rootfsRoot) ? readdirSync(rootfsRoot) : [];
  for (const id of ids) await removeRootfs(instance, id);
  // What else is mounted under the instance's directory (pods' namespaces of a killed run), deepest first.
  const instanceDir = `${join(RUN_DIR, instance)}/`;
  const mounted = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((line) => line.split(' ')[4])
    .filter((target): target is string => Boolean(target?.startsWith(instanceDir)))
    .sort((a, b) => b.length - a.length);
  for (const target of mounted) await runQuiet('umount', ['-l', target]);
  if (await answers()) {
    const keys = (await ctr(['snapshots', 'ls']).catch(() => ''))
      .split('\n')
      .map((l) => l.split(/\s+/)[0])
      .filter((k) => k.startsWith(`devop/${instance}/`));
    for (const key of keys) await ctrQuiet(['snapshots', 'rm', key]);
  }
  rmSync(join(RUN_DIR, instance), { recursive: true, force: true });
  for (const hierarchy of cgroupHierarchies()) removeCgroupTree(join(hierarchy, 'devop-standin', instance));
}
