// One container attempt as a host process: started inside the pod's netns (`ip netns exec`, which also bind-mounts the
// pod's resolv.conf/hosts) after moving itself into the container's cgroup, so that its PID's cgroup names the container.
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants, existsSync, mkdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { ContainerLogWriter } from './logs.js';

export interface ContainerLaunch {
  /** 64 hex characters, as containerd's. */
  id: string;
  argv: string[];
  env: Record<string, string>;
  workingDir: string;
  netns: string;
  cgroupDir: string;
  logPath: string;
  stdin: boolean;
  /** Shell lines run in the container's mount namespace before the command (volume mounts); empty for none. */
  setup?: string;
}

export interface ContainerExit {
  exitCode: number;
  signal?: string;
  /** Completed / Error as containerd reports an exit; StartError when the command could not be started. */
  reason: 'Completed' | 'Error' | 'StartError';
  startedAt: Date;
  finishedAt: Date;
}

/** Signal numbers for the 128+n exit codes a runtime reports for a killed process. */
export const SIGNAL_NUMBERS: Record<string, number> = { SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, SIGABRT: 6, SIGKILL: 9, SIGSEGV: 11, SIGPIPE: 13, SIGTERM: 15 };

/** The shell step that runs in the host's mount namespace: join the cgroup, then enter the netns and exec the command. */
const LAUNCH_SCRIPT = 'echo $$ > "$1/cgroup.procs" || exit 126; shift; exec ip netns exec "$@"';
/**
 * The last step, inside the netns (and the mount namespace `ip netns exec` makes): the volume mounts if any, then close
 * the start pipe (fd 3: the kubelet sees the container started) and exec the command.
 */
const SETUP_SCRIPT = (setup: string) => `${setup}\nexec 3>&-\nexec "$@"`;
/** The file descriptor of the start pipe in the launch chain (0-2 are the container's stdio). */
const START_FD = 3;

/** Finds an executable as execvp would with the container's PATH; undefined when there is none. */
export function lookPath(file: string, path: string): string | undefined {
  const candidates = file.includes('/') ? [file] : path.split(':').filter(Boolean).map((dir) => join(dir, file));
  for (const candidate of candidates) {
    try {
      accessSync(candidate, constants.X_OK);
      if (statSync(candidate).isFile()) return candidate;
    } catch {
      // not this one
    }
  }
  return undefined;
}

export class ContainerStartError extends Error {}

export class ContainerProcess {
  readonly startedAt = new Date();
  /** Resolves once the launch steps have handed over to the command (or the launch ended before that). */
  readonly started: Promise<void>;
  /** True once `started` has resolved. */
  hasStarted = false;
  readonly exited: Promise<ContainerExit>;
  private exitInfo: ContainerExit | undefined;
  private readonly child: ChildProcess;
  private readonly log: ContainerLogWriter;
  private logClosed = false;

  private constructor(readonly launch: ContainerLaunch) {
    const program = launch.argv[0] ?? '';
    const resolved = program.includes('/') && !program.startsWith('/') ? join(launch.workingDir, program) : program;
    if (!lookPath(resolved, launch.env.PATH ?? '')) {
      throw new ContainerStartError(
        `failed to create containerd task: exec: "${launch.argv[0]}": executable file not found in $PATH`,
      );
    }
    if (!existsSync(launch.workingDir)) mkdirSync(launch.workingDir, { recursive: true });
    this.log = new ContainerLogWriter(launch.logPath);
    const inner = ['/bin/sh', '-c', SETUP_SCRIPT(launch.setup ?? ''), 'sh', ...launch.argv];
    this.child = spawn('/bin/sh', ['-c', LAUNCH_SCRIPT, 'sh', launch.cgroupDir, launch.netns, ...inner], {
      env: launch.env,
      cwd: launch.workingDir,
      detached: true,
      stdio: [launch.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe', 'pipe'],
    });
    // A runtime reports a container started once its command runs, not while the launch steps (cgroup, netns, mounts)
    // still do: a signal sent before that would hit a wrapper shell (and kill it silently) instead of the command.
    this.started = new Promise<void>((resolve) => {
      const startPipe = this.child.stdio[START_FD] as Readable | null;
      const done = (): void => {
        this.hasStarted = true;
        startPipe?.destroy();
        resolve();
      };
      if (!startPipe) return done();
      startPipe.on('error', done);
      startPipe.on('close', done);
      startPipe.on('end', done);
      startPipe.resume();
    });
    this.child.stdout?.on('data', (c: Buffer) => this.log.write('stdout', c));
    this.child.stderr?.on('data', (c: Buffer) => this.log.write('stderr', c));
    this.child.stdin?.on('error', () => {});
    this.child.on('close', () => {
      void this.log.close().then(() => {
        this.logClosed = true;
      });
    });
    this.exited = new Promise((resolve) => {
      this.child.on('error', () => {});
      this.child.on('exit', (code, signal) => {
        const exitCode = code ?? 128 + (SIGNAL_NUMBERS[signal ?? ''] ?? 0);
        this.exitInfo = {
          exitCode,
          signal: signal ?? undefined,
          reason: exitCode === 0 ? 'Completed' : 'Error',
          startedAt: this.startedAt,
          finishedAt: new Date(),
        };
        resolve(this.exitInfo);
      });
    });
  }

  static start(launch: ContainerLaunch): ContainerProcess {
    return new ContainerProcess(launch);
  }

  get id(): string {
    return this.launch.id;
  }

  /** The host PID of the container's main process (the shell wrapper execs into it, so the PID stays the same). */
  get pid(): number {
    return this.child.pid ?? 0;
  }

  get running(): boolean {
    return this.exitInfo === undefined;
  }

  /** True once the process and everything that held its stdout/stderr are gone: the log file is complete. */
  get logEnded(): boolean {
    return this.logClosed;
  }

  get exit(): ContainerExit | undefined {
    return this.exitInfo;
  }

  /** Sends a signal to the main process only, as a runtime does for SIGTERM. */
  signal(sig: NodeJS.Signals): void {
    if (!this.running || !this.child.pid) return;
    try {
      process.kill(this.child.pid, sig);
    } catch {
      // exited meanwhile
    }
  }
}
