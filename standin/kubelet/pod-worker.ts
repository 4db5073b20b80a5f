// One pod on the node: its sandbox, its init, regular and ephemeral containers (start, restart with back-off under the
// restart policy, readiness), and its termination (SIGTERM, grace period, SIGKILL, sandbox removal).
import { randomBytes } from 'node:crypto';
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { V1Container, V1EphemeralContainer, V1Pod } from '@kubernetes/client-node';
import { ContainerProcess } from './container.js';
import {
  mountRootfs,
  podNamespacesDir,
  removePodCgroup,
  removeRootfs,
  type ImageInfo,
  type ImageStore,
} from './containerd.js';
import type { ContainerdEvents } from './containerd-events.js';
import { buildContainerEnv, EnvConfigError, expandRefs, type EnvSources } from './env.js';
import { podHostname } from './pod-hostname.js';
import { execInContainer } from './exec.js';
import type { NodeNetwork } from './network.js';
import { PodDialer } from './pod-dialer.js';
import { startLivenessLoop, startReadinessLoop, type ProbeTarget } from './probes.js';
import {
  currentAttempt,
  isAlive,
  isRunning,
  newRecord,
  type ContainerAttempt,
  type ContainerKind,
  type ContainerRecord,
} from './records.js';
import { PodSandbox } from './sandbox.js';
import { ensureImageExists, PullBackOff } from './image-pull.js';
import { containerCapabilities, parseQuantity, resolveUser, type SpecMount } from './oci-spec.js';
import { containerMounts, preparePodVolumes } from './volumes.js';

/** Restart back-off: first restart at once, then doubling from here (kubelet uses 10 s; tests should not wait that). */
const BACKOFF_BASE_MS = 200;
const BACKOFF_MAX_MS = 5_000;
/** A container that ran this long resets its back-off, as kubelet does after a stable run. */
const BACKOFF_RESET_AFTER_MS = 10_000;
/**
 * How soon a container whose image is not there is tried again (the kubelet's pod worker re-syncs after 10 s): shorter
 * than the pull back-off, so that the rounds in between show ImagePullBackOff, as on a node.
 */
const IMAGE_RETRY_MS = 500;
const IMAGE_ERRORS = new Set(['ErrImagePull', 'ImagePullBackOff', 'ErrImageNeverPull']);

export interface PodWorkerDeps {
  nodeName: string;
  nodeIP: string;
  network: NodeNetwork;
  /** Names the stand-in's containers and snapshots in containerd. */
  instance: string;
  images: ImageStore;
  events: ContainerdEvents;
  /** The executable containerd's shim runs as each container's logger. */
  loggerPath: string;
  /** exec-reaper.c, built for pods/exec. */
  execReaperPath: string;
  /** What the kubelet's own process may hand on to containers (privileged and ALL mean these). */
  boundingCapabilities: string[];
  envSources: EnvSources;
  /** Per-instance directory for relay sockets and logs. */
  stateDir: string;
  /** Per-instance directory for pod volumes (outside /run, which containers get as their own empty tmpfs). */
  volumesDir: string;
  /** Unique netns/veth names for a new sandbox. */
  sandboxNames(): { netns: string; hostVeth: string };
  clusterDomain: string;
  onChange(worker: PodWorker): void;
  event(pod: V1Pod, type: 'Normal' | 'Warning', reason: string, message: string, fieldPath?: string): void;
}

export type RestartPolicy = 'Always' | 'OnFailure' | 'Never';

/**
 * The rootfs of the pod's first container, made while its sandbox is set up — containerd's CRI plugin makes a snapshot
 * in-process in a few ms, here it is two processes — and taken by that container's first attempt when it runs the same
 * image; removed when it is not taken (the sandbox failed, the pod stops, the image changed).
 */
interface EarlyRootfs {
  rec: ContainerRecord;
  /** The container ID the snapshot is named after (snapshotKey): the attempt that takes it runs under this ID. */
  id: string;
  /** Its image's top layer and its mount; undefined when nothing was made (image absent, or a failed prepare). */
  made: Promise<{ chainID: string; dir: string } | undefined>;
}

export class PodWorker {
  readonly uid: string;
  readonly startTime = new Date();
  sandbox: PodSandbox | undefined;
  dialer: PodDialer | undefined;
  readonly records = new Map<string, ContainerRecord>();
  initialized = false;
  sandboxError: string | undefined;
  private stopping = false;
  private sandboxCreation: Promise<PodSandbox> | undefined;
  private terminated: Promise<void> | undefined;
  /** Set while the containers are given their grace period: brings its end forward for a shorter one. */
  private shortenGrace: ((seconds: number) => void) | undefined;
  private readonly wakers = new Set<() => void>();
  private readonly stopProbes = new Map<string, () => void>();
  private readonly logDir: string;
  private readonly podVolumesDir: string;
  private volumeDirs = new Map<string, string>();
  private readonly pullBackOff = new PullBackOff();
  private earlyRootfs: EarlyRootfs | undefined;

  constructor(
    public pod: V1Pod,
    private readonly deps: PodWorkerDeps,
  ) {
    this.uid = pod.metadata?.uid ?? randomBytes(8).toString('hex');
    this.logDir = join(deps.stateDir, 'logs', `${pod.metadata?.namespace}_${pod.metadata?.name}_${this.uid}`);
    this.podVolumesDir = join(deps.volumesDir, this.uid);
    for (const c of pod.spec?.initContainers ?? []) this.records.set(c.name, newRecord(c, 'init'));
    for (const c of pod.spec?.containers ?? []) this.records.set(c.name, newRecord(c, 'regular'));
  }

  get name(): string {
    return this.pod.metadata?.name ?? '';
  }

  get namespace(): string {
    return this.pod.metadata?.namespace ?? 'default';
  }

  get restartPolicy(): RestartPolicy {
    return (this.pod.spec?.restartPolicy as RestartPolicy | undefined) ?? 'Always';
  }

  get isStopping(): boolean {
    return this.stopping;
  }

  recordsOf(kind: ContainerKind): ContainerRecord[] {
    return [...this.records.values()].filter((r) => r.kind === kind);
  }

  /** Runs the pod: sandbox, init containers in order, then the regular containers side by side. */
  async run(): Promise<void> {
    while (!this.sandbox && !this.stopping) {
      try {
        const names = this.deps.sandboxNames();
        this.prepareEarlyRootfs();
        this.sandboxCreation = PodSandbox.create(this.deps.network, {
          name: names.netns,
          hostVeth: names.hostVeth,
          podName: this.name,
          namespace: this.namespace,
          dnsSearch: [
            `${this.namespace}.svc.${this.deps.clusterDomain}`,
            `svc.${this.deps.clusterDomain}`,
            this.deps.clusterDomain,
          ],
          hostAliases: (this.pod.spec?.hostAliases ?? []).map((a) => ({
            ip: a.ip ?? '',
            hostnames: a.hostnames ?? [],
          })),
          namespacesDir: podNamespacesDir(this.deps.instance, names.netns),
          host: podHostname(this.pod, this.deps.clusterDomain),
        });
        this.sandbox = await this.sandboxCreation;
        this.dialer = new PodDialer(names.netns, join(this.deps.stateDir, `${names.netns}.sock`));
        this.sandboxError = undefined;
      } catch (err) {
        // No sandbox, no container: what was made for one goes (RunPodSandbox failed before any CreateContainer).
        await this.dropEarlyRootfs();
        this.sandboxError = (err as Error).message;
        this.deps.event(
          this.pod,
          'Warning',
          'FailedCreatePodSandBox',
          `Failed to create pod sandbox: ${this.sandboxError}`,
        );
        this.changed();
        await this.sleep(1000);
      }
    }
    if (this.stopping) return;
    mkdirSync(this.logDir, { recursive: true });
    this.changed();
    let mountFailures = 0;
    while (!this.stopping) {
      try {
        this.volumeDirs = await preparePodVolumes(this.pod, this.podVolumesDir, this.deps.envSources);
        break;
      } catch (err) {
        this.deps.event(this.pod, 'Warning', 'FailedMount', `MountVolume.SetUp failed: ${(err as Error).message}`);
        await this.sleep(Math.min(BACKOFF_BASE_MS * 2 ** mountFailures++, BACKOFF_MAX_MS));
      }
    }
    if (this.stopping) return;
    for (const rec of this.recordsOf('init')) {
      const exitCode = await this.runContainer(rec, this.restartPolicy === 'Never' ? 'Never' : 'OnFailure');
      if (this.stopping || exitCode !== 0) {
        for (const other of this.recordsOf('regular')) other.done = true;
        this.changed();
        return;
      }
    }
    this.initialized = true;
    this.changed();
    for (const rec of this.recordsOf('ephemeral')) void this.runContainer(rec, 'Never');
    await Promise.all(this.recordsOf('regular').map((rec) => this.runContainer(rec, this.restartPolicy)));
  }

  /** A newer version of the pod object: starts ephemeral containers that were added. */
  update(pod: V1Pod): void {
    this.pod = pod;
    for (const c of pod.spec?.ephemeralContainers ?? []) {
      if (this.records.has(c.name)) continue;
      const rec = newRecord(c as V1EphemeralContainer, 'ephemeral');
      this.records.set(c.name, rec);
      this.changed();
      if (this.initialized) void this.runContainer(rec, 'Never');
    }
  }

  private changed(): void {
    this.deps.onChange(this);
  }

  private sleep(ms: number): Promise<void> {
    if (this.stopping) return Promise.resolve();
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.wakers.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.wakers.add(wake);
    });
  }

  /** Runs a container until its restart policy says it is done; resolves to its last exit code (-1 if it never ran). */
  private async runContainer(rec: ContainerRecord, policy: RestartPolicy): Promise<number> {
    let failures = 0;
    let lastExitCode = -1;
    while (!this.stopping) {
      const outcome = await this.attempt(rec);
      if (this.stopping) break;
      if (outcome.kind === 'error') {
        const delay = Math.min(BACKOFF_BASE_MS * 2 ** failures++, BACKOFF_MAX_MS);
        await this.sleep(IMAGE_ERRORS.has(outcome.reason) ? IMAGE_RETRY_MS : delay);
        continue;
      }
      lastExitCode = outcome.exitCode;
      const restart = policy === 'Always' || (policy === 'OnFailure' && outcome.exitCode !== 0);
      if (!restart) break;
      if (outcome.ranMs >= BACKOFF_RESET_AFTER_MS) failures = 0;
      const delay = failures === 0 ? 0 : Math.min(BACKOFF_BASE_MS * 2 ** (failures - 1), BACKOFF_MAX_MS);
      failures++;
      if (delay > 0) {
        rec.waiting = {
          reason: 'CrashLoopBackOff',
          message:
            `back-off ${delay}ms restarting failed container=${rec.name} ` +
            `pod=${this.name}_${this.namespace}(${this.uid})`,
        };
        this.deps.event(this.pod, 'Warning', 'BackOff', 'Back-off restarting failed container', fieldPathOf(rec));
        this.changed();
        await this.sleep(delay);
      }
      if (this.stopping) break;
      rec.restartCount++;
    }
    rec.done = true;
    rec.waiting = undefined;
    this.changed();
    return lastExitCode;
  }

  private async attempt(
    rec: ContainerRecord,
  ): Promise<{ kind: 'error'; reason: string } | { kind: 'exit'; exitCode: number; ranMs: number }> {
    const fieldPath = fieldPathOf(rec);
    const pulled = await ensureImageExists(this.pod, rec.spec, this.deps.images, this.pullBackOff, (type, reason, m) =>
      this.deps.event(this.pod, type, reason, m, fieldPath),
    );
    if (pulled.kind === 'error') {
      await this.dropEarlyRootfs(rec);
      // kuberuntime_container.go startContainer: the waiting reason is the error, and an event says so.
      rec.waiting = { reason: pulled.reason, message: pulled.message };
      this.deps.event(this.pod, 'Warning', 'Failed', `Error: ${pulled.reason}`, fieldPath);
      this.changed();
      return { kind: 'error', reason: pulled.reason };
    }
    const image = pulled.image;
    rec.imageID = image.imageID;
    let env: Record<string, string>;
    try {
      env = await buildContainerEnv(
        {
          pod: this.pod,
          container: rec.spec,
          podIP: this.sandbox!.podIP,
          podIPs: this.sandbox!.podIPs,
          hostIP: this.deps.nodeIP,
          hostname: this.sandbox!.config.host.nodename,
          imageEnv: image.env,
        },
        this.deps.envSources,
      );
    } catch (err) {
      if (!(err instanceof EnvConfigError)) throw err;
      await this.dropEarlyRootfs(rec);
      rec.waiting = { reason: 'CreateContainerConfigError', message: err.message };
      this.deps.event(this.pod, 'Warning', 'Failed', `Error: ${err.message}`, fieldPath);
      this.changed();
      return { kind: 'error', reason: 'CreateContainerConfigError' };
    }
    const command = rec.spec.command?.length ? rec.spec.command : image.entrypoint;
    const args = rec.spec.command?.length ? (rec.spec.args ?? []) : rec.spec.args?.length ? rec.spec.args : image.cmd;
    const argv = [...command, ...args].map((a) => expandRefs(a, env));
    if (argv.length === 0) {
      await this.dropEarlyRootfs(rec);
      rec.waiting = { reason: 'CreateContainerError', message: 'Error: no command specified' };
      this.changed();
      return { kind: 'error', reason: 'CreateContainerError' };
    }
    const early = await this.earlyRootfsOf(rec, image);
    // A pod stopping meanwhile has removed what was made early (terminate).
    if (this.stopping) return { kind: 'error', reason: 'Stopping' };
    if (early) this.earlyRootfs = undefined;
    const id = early?.id ?? randomBytes(32).toString('hex');
    const containerLogDir = join(this.logDir, rec.name);
    mkdirSync(containerLogDir, { recursive: true });
    const attempt: ContainerAttempt = { id, logPath: join(containerLogDir, `${rec.restartCount}.log`) };
    rec.attempts.push(attempt);
    const sc = rec.spec.securityContext ?? {};
    const podSc = this.pod.spec?.securityContext ?? {};
    const privileged = Boolean(sc.privileged);
    const runAsUser = sc.runAsUser ?? podSc.runAsUser;
    const runAsGroup = sc.runAsGroup ?? podSc.runAsGroup;
    attempt.proc = ContainerProcess.start({
      id,
      instance: this.deps.instance,
      podUid: this.uid,
      image,
      rootfs: early?.dir,
      spec: {
        argv,
        env,
        cwd: rec.spec.workingDir || image.workingDir || '/',
        uid: 0,
        gid: 0,
        utsPath: this.sandbox!.utsPath,
        ipcPath: this.pod.spec?.hostIPC ? 'host' : this.sandbox!.ipcPath,
        netnsPath: this.sandbox!.netnsPath,
        pidNamespace: this.pidNamespaceOf(rec),
        capabilities: containerCapabilities({
          privileged,
          add: sc.capabilities?.add,
          drop: sc.capabilities?.drop,
        }).filter((c) => this.deps.boundingCapabilities.includes(c)),
        privileged,
        readOnlyRootFilesystem: Boolean(sc.readOnlyRootFilesystem),
        noNewPrivileges: sc.allowPrivilegeEscalation === false && !privileged,
        mounts: this.mountsOf(rec),
        limits: {
          memoryBytes: parseQuantity((rec.spec as V1Container).resources?.limits?.memory),
          cpuMillis: cpuMillis((rec.spec as V1Container).resources?.limits?.cpu),
        },
      },
      resolveUser: (rootfs) => resolveUser(rootfs, image.user, runAsUser, runAsGroup),
      oomKilled: () => this.deps.events.take(id),
      labels: {
        'io.kubernetes.pod.name': this.name,
        'io.kubernetes.pod.namespace': this.namespace,
        'io.kubernetes.pod.uid': this.uid,
        'io.kubernetes.container.name': rec.name,
      },
      workDir: join(this.deps.stateDir, 'containers', id),
      logPath: attempt.logPath,
      loggerPath: this.deps.loggerPath,
    });
    await attempt.proc.started;
    if (!attempt.proc.hasStarted) {
      const exit = await attempt.proc.exited;
      attempt.exit = exit;
      rec.waiting = undefined;
      this.deps.event(
        this.pod,
        'Warning',
        'Failed',
        `Error: ${exit.message ?? 'the container did not start'}`,
        fieldPath,
      );
      this.changed();
      return { kind: 'exit', exitCode: exit.exitCode, ranMs: 0 };
    }
    rec.waiting = undefined;
    rec.ready = false;
    this.deps.event(this.pod, 'Normal', 'Created', `Created container ${rec.name}`, fieldPath);
    this.deps.event(this.pod, 'Normal', 'Started', `Started container ${rec.name}`, fieldPath);
    this.startProbes(rec, attempt);
    this.changed();
    const exit = await attempt.proc.exited;
    this.stopProbes.get(rec.name)?.();
    rec.ready = false;
    attempt.exit = exit;
    this.changed();
    return { kind: 'exit', exitCode: exit.exitCode, ranMs: exit.finishedAt.getTime() - exit.startedAt.getTime() };
  }

  /** Starts making the first container's rootfs, when its image is present: beside the sandbox, unseen by the API. */
  private prepareEarlyRootfs(): void {
    const rec = this.recordsOf('init')[0] ?? this.recordsOf('regular')[0];
    if (!rec || this.earlyRootfs) return;
    const id = randomBytes(32).toString('hex');
    const { instance, images } = this.deps;
    // Asked without events: the Pulled event (or the image's error) comes from the attempt, after the sandbox. A
    // prepare that fails is made again by the attempt, which reports its error as before.
    const made = images
      .resolve(rec.spec.image ?? '')
      .then(async (image) => image && { chainID: image.chainID, dir: await mountRootfs(instance, id, image) })
      .catch(() => undefined);
    this.earlyRootfs = { rec, id, made };
  }

  /** The early rootfs for this attempt of `rec` on `image`, if one was made of that image; removes one that was not. */
  private async earlyRootfsOf(
    rec: ContainerRecord,
    image: ImageInfo,
  ): Promise<{ id: string; dir: string } | undefined> {
    const early = this.earlyRootfs;
    if (early?.rec !== rec) return undefined;
    const made = await early.made;
    if (this.earlyRootfs !== early) return undefined; // removed meanwhile (the pod stops)
    if (made?.chainID === image.chainID) return { id: early.id, dir: made.dir };
    await this.dropEarlyRootfs(); // another image than the one resolved beside the sandbox (re-imported since)
    return undefined;
  }

  /** Removes the early rootfs (of `rec` only, when given) unless an attempt took it. */
  private async dropEarlyRootfs(rec?: ContainerRecord): Promise<void> {
    const early = this.earlyRootfs;
    if (!early || (rec && early.rec !== rec)) return;
    this.earlyRootfs = undefined;
    if (await early.made) await removeRootfs(this.deps.instance, early.id);
  }

  /** The pod's /etc/hosts, /etc/resolv.conf and /etc/hostname (kubelet-managed files), then the container's volumes. */
  private mountsOf(rec: ContainerRecord): SpecMount[] {
    const etc = this.sandbox!.etcDir;
    return [
      { source: join(etc, 'hosts'), destination: '/etc/hosts', readOnly: false },
      { source: join(etc, 'resolv.conf'), destination: '/etc/resolv.conf', readOnly: false },
      { source: join(etc, 'hostname'), destination: '/etc/hostname', readOnly: false },
      ...containerMounts(this.pod, rec.spec, this.volumeDirs).map((m) => ({
        source: m.source,
        destination: m.target,
        readOnly: m.readOnly,
      })),
    ];
  }

  /** hostPID: the host's; an ephemeral container with targetContainerName: its target's; else one of its own. */
  private pidNamespaceOf(rec: ContainerRecord): 'host' | string | undefined {
    if (this.pod.spec?.hostPID) return 'host';
    const target = rec.kind === 'ephemeral' ? (rec.spec as V1EphemeralContainer).targetContainerName : undefined;
    const targetRecord = target ? this.records.get(target) : undefined;
    const pid = targetRecord ? currentAttempt(targetRecord)?.proc?.pid : undefined;
    return pid ? `/proc/${pid}/ns/pid` : undefined;
  }

  private startProbes(rec: ContainerRecord, attempt: ContainerAttempt): void {
    const spec = rec.spec as V1Container;
    const readiness = rec.kind === 'regular' ? spec.readinessProbe : undefined;
    const liveness = rec.kind === 'regular' ? spec.livenessProbe : undefined;
    const target: ProbeTarget = {
      podIP: this.sandbox!.podIP,
      nodeIP: this.deps.nodeIP,
      container: spec,
      exec: (command, timeoutMs) => this.execForProbe(rec, command, timeoutMs),
    };
    const stops: Array<() => void> = [];
    if (readiness) {
      stops.push(
        startReadinessLoop(readiness, target, (ready) => {
          rec.ready = ready;
          this.changed();
        }),
      );
    } else {
      rec.ready = rec.kind === 'regular';
    }
    if (liveness) {
      stops.push(
        startLivenessLoop(liveness, target, () => {
          const fieldPath = fieldPathOf(rec);
          this.deps.event(this.pod, 'Warning', 'Unhealthy', 'Liveness probe failed', fieldPath);
          this.deps.event(
            this.pod,
            'Normal',
            'Killing',
            `Container ${rec.name} failed liveness probe, will be restarted`,
            fieldPath,
          );
          const grace = liveness.terminationGracePeriodSeconds ?? this.pod.spec?.terminationGracePeriodSeconds ?? 30;
          void this.killAttempt(attempt, grace);
        }),
      );
    }
    this.stopProbes.set(rec.name, () => {
      for (const stop of stops) stop();
    });
  }

  /**
   * SIGTERM, then SIGKILL for every process of the container once the grace period is over (the restart policy then
   * decides).
   */
  private async killAttempt(attempt: ContainerAttempt, graceSeconds: number): Promise<void> {
    const proc = attempt.proc;
    if (!proc?.running) return;
    proc.signal('SIGTERM');
    let timer: NodeJS.Timeout | undefined;
    const grace = new Promise<void>((resolve) => (timer = setTimeout(resolve, graceSeconds * 1000)));
    await Promise.race([proc.exited, grace]);
    clearTimeout(timer);
    if (proc.running) {
      proc.signal('SIGKILL');
      await proc.exited;
    }
  }

  private async execForProbe(rec: ContainerRecord, command: string[], timeoutMs: number): Promise<number> {
    const proc = this.execProcess(rec, command, false, false);
    proc.stdout.resume();
    proc.stderr.resume();
    const timer = setTimeout(() => proc.kill(), timeoutMs);
    const { exitCode } = await proc.wait();
    clearTimeout(timer);
    return exitCode;
  }

  /** Runs a command in a running container (pods/exec and exec probes). */
  execProcess(rec: ContainerRecord, command: string[], stdin: boolean, tty: boolean) {
    const attempt = currentAttempt(rec);
    if (!attempt?.proc || !isRunning(rec)) throw new Error(`container ${rec.name} is not running`);
    return execInContainer(this.deps.execReaperPath, attempt.id, command, stdin, tty);
  }

  /**
   * Stops the pod: SIGTERM to every container, SIGKILL (all their processes) after the grace period, then the sandbox
   * goes.
   */
  terminate(gracePeriodSeconds: number): Promise<void> {
    // A pod already stopping may only have its grace period shortened (a force delete: 0), never lengthened, as the
    // kubelet's pod workers cancel the running kill for a shorter one (kubernetes pkg/kubelet/pod_workers.go).
    if (this.terminated) {
      this.shortenGrace?.(gracePeriodSeconds);
      return this.terminated;
    }
    this.stopping = true;
    for (const wake of [...this.wakers]) wake();
    for (const stop of this.stopProbes.values()) stop();
    this.terminated = (async () => {
      const running = [...this.records.values()].filter(isAlive);
      for (const rec of running) {
        this.deps.event(this.pod, 'Normal', 'Killing', `Stopping container ${rec.name}`, fieldPathOf(rec));
        // A container still being launched gets its SIGTERM once its command runs, as the command would on a node.
        const proc = currentAttempt(rec)!.proc!;
        void proc.started.then(() => proc.signal('SIGTERM'));
      }
      const exits = Promise.all(running.map((rec) => currentAttempt(rec)!.proc!.exited));
      let timer: NodeJS.Timeout | undefined;
      const grace = new Promise<void>((resolve) => {
        let deadline = Date.now() + Math.max(0, gracePeriodSeconds) * 1000;
        timer = setTimeout(resolve, deadline - Date.now());
        this.shortenGrace = (seconds) => {
          const sooner = Date.now() + Math.max(0, seconds) * 1000;
          if (sooner >= deadline) return;
          deadline = sooner;
          clearTimeout(timer);
          timer = setTimeout(resolve, deadline - Date.now());
        };
      });
      await Promise.race([exits, grace]);
      clearTimeout(timer);
      for (const rec of this.records.values()) currentAttempt(rec)?.proc?.signal('SIGKILL');
      await exits;
      await this.dropEarlyRootfs();
      const created = await this.sandboxCreation?.catch(() => undefined);
      await this.dialer?.stop();
      await (created ?? this.sandbox)?.remove();
      removePodCgroup(this.deps.instance, this.uid);
      rmSync(this.podVolumesDir, { recursive: true, force: true });
    })();
    return this.terminated;
  }
}

export function fieldPathOf(rec: ContainerRecord): string {
  const section =
    rec.kind === 'init' ? 'initContainers' : rec.kind === 'ephemeral' ? 'ephemeralContainers' : 'containers';
  return `spec.${section}{${rec.name}}`;
}

function cpuMillis(cpu: string | undefined): number | undefined {
  const cores = parseQuantity(cpu);
  return cores === undefined ? undefined : cores * 1000;
}
