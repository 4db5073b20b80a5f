// pods/exec's backend: `runc exec` on the container containerd's shim runs — its namespaces, cgroup, user, env,
// capabilities and working directory come from the container's spec (runc starts from the bundle's process), as with
// CRI's ExecSync/Exec. Without tty runc runs it detached under exec-reaper.c, a child subreaper as the shim is, and the
// command's stdio is our pipes, passed down: no copy in between, so neither a background child of the command holding
// them nor a busy machine changes what arrives (`ctr tasks exec` copied the output through FIFOs and lost a short
// command's output a few times in a hundred on a busy machine, as it did a container's logs). With tty runc gets a
// terminal from script(1) and makes the command a pty of its own, copied to that terminal.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { ExecProcess } from '../node-runtime.js';
import { K8S_NAMESPACE } from './containerd.js';

/** Where containerd's runc shim keeps its containers' runc state (the shim's default root, per namespace). */
const RUNC_ROOT = join('/run/containerd/runc', K8S_NAMESPACE);

/** How long an exec'd command's output may keep flowing after it exited (background children holding the pipes). */
const EXEC_DRAIN_MS = 300;

function shellQuote(arg: string): string {
  return `'${arg.replace(/'/g, `'\\''`)}'`;
}

export function execInContainer(
  reaper: string,
  containerID: string,
  command: string[],
  stdin: boolean,
  tty: boolean,
): ExecProcess {
  if (!existsSync(join(RUNC_ROOT, containerID, 'state.json'))) {
    throw new Error(`container ${containerID} has no runc state under ${RUNC_ROOT}: is it running?`);
  }
  // Beside the reaper, in the instance's run directory: what a killed stand-in leaves, the next one's start removes.
  const scratch = mkdtempSync(join(dirname(reaper), 'exec-'));
  const pidFile = join(scratch, 'pid');
  const runc = ['runc', '--root', RUNC_ROOT, 'exec', '--pid-file', pidFile];
  // exec: script(1) runs the line with $SHELL, and a non-interactive sh left in between would take the pty's signals.
  const [cmd, ...args] = tty
    ? ['script', '-qfec', `exec ${[...runc, '--tty', containerID, ...command].map(shellQuote).join(' ')}`, '/dev/null']
    : [reaper, pidFile, ...runc, '--detach', containerID, ...command];
  const child = spawn(cmd, args, {
    env: { ...process.env, ...(tty ? { TERM: process.env.TERM ?? 'xterm' } : {}) },
    stdio: [stdin || tty ? 'pipe' : 'ignore', 'pipe', 'pipe'],
  });
  child.stdin?.on('error', () => undefined); // EPIPE after the command exited
  const done = new Promise<{ exitCode: number; signal?: string }>((resolve) => {
    child.once('error', () => resolve({ exitCode: 126 }));
    child.once('exit', (code, signal) => {
      rmSync(scratch, { recursive: true, force: true });
      const result = { exitCode: code ?? 128, signal: signal ?? undefined };
      // The output pipes close when the command exits, unless something it started in the background still holds them:
      // give them a moment to drain, then stop waiting for such a child (the exec session is over).
      if (child.stdout?.readableEnded !== false && child.stderr?.readableEnded !== false) return resolve(result);
      const timer = setTimeout(() => {
        child.stdout?.destroy();
        child.stderr?.destroy();
        resolve(result);
      }, EXEC_DRAIN_MS);
      child.once('close', () => {
        clearTimeout(timer);
        resolve(result);
      });
    });
  });
  return {
    stdin: child.stdin,
    stdout: child.stdout!,
    stderr: child.stderr!,
    resize: () => {
      // script(1) gives runc a terminal but offers no way to resize it from outside.
    },
    wait: () => done,
    kill: () => {
      // The command runs in the container, not as our child: a SIGKILL to runc or the reaper would leave it running.
      // Killed, it ends runc or the reaper with its status (137); with no pid file yet, runc has not started it, and
      // its init ends with runc.
      try {
        const pid = Number(readFileSync(pidFile, 'utf8'));
        if (pid > 1) return process.kill(pid, 'SIGKILL'); // 0 or -1 would be a process group of ours
      } catch {
        // not started, or already gone
      }
      child.kill('SIGKILL');
    },
  };
}
