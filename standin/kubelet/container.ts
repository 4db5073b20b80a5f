// One container attempt as containerd runs it: a snapshot of the image mounted as its rootfs, the OCI spec the kubelet
// built (oci-spec.ts), and `ctr run --config` in the foreground — the shim's logger writes the container's output to
// its log file, ctr's exit status is the task's. Signals go to the task through containerd (`ctr tasks kill`), never to
// ctr.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { containerSpec, type ContainerSpecInput } from './oci-spec.js';
import {
  containerCgroup,
  ctrArgv,
  ctrQuiet,
  INSTANCE_LABEL,
  labelRootfs,
  mountRootfs,
  removeRootfs,
  type ImageInfo,
} from './containerd.js';

export interface ContainerLaunch {
  /** 64 hex characters, as containerd's CRI plugin makes them. */
  id: string;
  instance: string;
  podUid: string;
  image: ImageInfo;
  /** Everything of the spec but what the runtime side decides (rootfs, cgroup). */
  spec: Omit<ContainerSpecInput, 'rootfs' | 'cgroupsPath'>;
  /** The rootfs made ahead for this id and image (mountRootfs, beside the pod's sandbox); else the launch makes it. */
  rootfs?: string;
  /** Resolves the user of the spec against the image's /etc/passwd and /etc/group, once the rootfs is mounted. */
  resolveUser?(rootfs: string): { uid: number; gid: number };
  labels: Record<string, string>;
  /** True when containerd reported the task hit by the OOM killer (asked once, at exit). */
  oomKilled?(): boolean;
  /** Directory for the spec and the pid file of this attempt. */
  workDir: string;
  logPath: string;
  /** The logger containerd's shim runs for the container's stdout/stderr (container-logger.c). */
  loggerPath: string;
}

export interface ContainerExit {
  exitCode: number;
  signal?: string;
  /** Completed / Error as containerd reports an exit; StartError when the command could not be started. */
  reason: 'Completed' | 'Error' | 'StartError' | 'OOMKilled';
  message?: string;
  startedAt: Date;
  finishedAt: Date;
}

/** Signal numbers for the 128+n exit codes a runtime reports for a killed process. */
export const SIGNAL_NUMBERS: Record<string, number> = {
  SIGHUP: 1,
  SIGINT: 2,
  SIGQUIT: 3,
  SIGABRT: 6,
  SIGKILL: 9,
  SIGSEGV: 11,
  SIGPIPE: 13,
  SIGTERM: 15,
};

/**
 * How often the launcher looks for the pid file that says containerd created the task (ctr writes it before it starts
 * the task: cmd/ctr/commands/run/run.go). containerd's /tasks/start event, heard through `ctr events`, comes ~20 ms
 * after the file, and later still on a busy node (pods Running 35 ms later, measured): the file is noticed sooner.
 */
const PID_POLL_MS = 20;

export class ContainerProcess {
  startedAt = new Date();
  /** Resolves once the task exists and runs its command (or the attempt ended before that). */
  readonly started: Promise<void>;
  /** True once the task has started. */
  hasStarted = false;
  readonly exited: Promise<ContainerExit>;
  private exitInfo: ContainerExit | undefined;
  private taskPid = 0;
  private logClosed = false;
  private cancelled = false;
  private markStarted!: () => void;

  private constructor(readonly launch: ContainerLaunch) {
    this.started = new Promise<void>((resolve) => (this.markStarted = resolve));
    this.exited = this.run().then((exit) => {
      this.exitInfo = exit;
      this.markStarted();
      return exit;
    });
  }

  static start(launch: ContainerLaunch): ContainerProcess {
    return new ContainerProcess(launch);
  }

  get id(): string {
    return this.launch.id;
  }

  /** The host PID of the container's main process. */
  get pid(): number {
    return this.taskPid;
  }

  get running(): boolean {
    return this.exitInfo === undefined;
  }

  /** True once the task and everything that held its stdout/stderr are gone: the log file is complete. */
  get logEnded(): boolean {
    return this.logClosed;
  }

  get exit(): ContainerExit | undefined {
    return this.exitInfo;
  }

  /** Signals the container's main process, as a runtime does for SIGTERM; SIGKILL kills all of its processes. */
  signal(sig: NodeJS.Signals): void {
    if (!this.running) return;
    if (!this.hasStarted) {
      // Not created yet: the launch stops before it starts anything.
      if (sig === 'SIGKILL') this.cancelled = true;
      else void this.started.then(() => this.signal(sig));
      return;
    }
    void ctrQuiet(['tasks', 'kill', ...(sig === 'SIGKILL' ? ['-a'] : []), '-s', sig, this.id]);
  }

  private async run(): Promise<ContainerExit> {
    const { launch } = this;
    const startError = (message: string): ContainerExit => {
      const now = new Date();
      return { exitCode: 128, reason: 'StartError', message, startedAt: now, finishedAt: now };
    };
    mkdirSync(launch.workDir, { recursive: true });
    let rootfs: string;
    try {
      rootfs = launch.rootfs ?? (await mountRootfs(launch.instance, launch.id, launch.image));
    } catch (err) {
      this.logClosed = true;
      return startError(`failed to prepare the container's rootfs: ${(err as Error).message}`);
    }
    // The snapshot's label is no part of what starts the container: it runs beside `ctr run`, and ends before the
    // snapshot is removed.
    const labelled = labelRootfs(launch.instance, launch.id);
    try {
      const user = launch.resolveUser?.(rootfs) ?? { uid: launch.spec.uid, gid: launch.spec.gid };
      const spec = containerSpec({
        ...launch.spec,
        ...user,
        rootfs,
        cgroupsPath: containerCgroup(launch.instance, launch.podUid, launch.id),
      });
      const specPath = join(launch.workDir, 'config.json');
      writeFileSync(specPath, JSON.stringify(spec));
      if (this.cancelled) return startError('the pod is stopping');
      return await this.runTask(specPath);
    } catch (err) {
      this.logClosed = true;
      return startError((err as Error).message);
    } finally {
      await labelled;
      await removeRootfs(launch.instance, launch.id);
      rmSync(launch.workDir, { recursive: true, force: true });
    }
  }

  private runTask(specPath: string): Promise<ContainerExit> {
    const { launch } = this;
    const pidFile = join(launch.workDir, 'pid');
    const labels = Object.entries({ ...launch.labels, [INSTANCE_LABEL]: launch.instance }).flatMap(([k, v]) => [
      '--label',
      `${k}=${v}`,
    ]);
    // The container's stdout/stderr go through the shim to a logger it starts before the container (ctr's own copy of
    // them through FIFOs loses what a container writes just before it exits, a few times in a hundred).
    const logURI = `binary://${launch.loggerPath}?${launch.logPath}`;
    const [cmd, ...args] = ctrArgv([
      'run',
      '--rm',
      '--config',
      specPath,
      '--pid-file',
      pidFile,
      '--log-uri',
      logURI,
      ...labels,
      launch.id,
    ]);
    const child = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    // ctr's own messages: why it could not create or start the task.
    let ctrErrors = '';
    child.stderr?.on('data', (c: Buffer) => (ctrErrors += c.toString()));
    const taskCreated = (): boolean => {
      if (this.hasStarted) return true;
      this.taskPid = existsSync(pidFile) ? Number(readFileSync(pidFile, 'utf8').trim()) || 0 : 0;
      if (!this.taskPid) return false;
      this.hasStarted = true;
      this.startedAt = new Date();
      if (this.cancelled) this.signal('SIGKILL');
      this.markStarted();
      return true;
    };
    const watchPid = setInterval(() => taskCreated() && clearInterval(watchPid), PID_POLL_MS);
    return new Promise<ContainerExit>((resolve) => {
      child.on('error', () => undefined); // reported by the exit handler
      child.on('close', (code, signal) => {
        clearInterval(watchPid);
        // ctr returns once the task is deleted, which waits for the logger: the log file is complete.
        this.logClosed = true;
        const finishedAt = new Date();
        // ctr failing to start a created task also prints "ctr: …" and exits 1 before the kubelet saw it start.
        const ctrFailed = !this.hasStarted && code !== 0 && /^ctr: /m.test(ctrErrors);
        if (ctrFailed || !taskCreated()) {
          const message = ctrErrors.replace(/^ctr: /, '').trim() || `ctr exited with ${code ?? signal}`;
          resolve({ exitCode: 128, reason: 'StartError', message, startedAt: finishedAt, finishedAt });
          return;
        }
        // ctr ended by a signal (it never is by the kubelet): the task may still be there.
        if (code === null)
          void ctrQuiet(['tasks', 'rm', '-f', launch.id]).then(() => ctrQuiet(['containers', 'rm', launch.id]));
        const exitCode = code ?? 128 + (SIGNAL_NUMBERS[signal ?? ''] ?? 0);
        // containerd saw the kernel's OOM killer hit it (the event comes before the exit's).
        const oomKilled = launch.oomKilled?.() ?? false;
        resolve({
          exitCode,
          reason: exitCode === 0 ? 'Completed' : oomKilled ? 'OOMKilled' : 'Error',
          startedAt: this.startedAt,
          finishedAt,
        });
      });
    });
  }
}
