// pods/exec's backend: a command run in a running container's network and mount namespaces (nsenter -t <pid>), in its
// cgroup, with its env and working directory; with tty, under script(1) so the command sees a terminal.
import { spawn } from 'node:child_process';
import type { ExecProcess } from '../node-runtime.js';

/** Joins the container's cgroup from the host mount namespace, then enters its namespaces and runs the command. */
const EXEC_SCRIPT = 'echo $$ > "$1/cgroup.procs" || exit 126; pid=$2; shift 2; exec nsenter -t "$pid" -n -m --wd -- "$@"';

/** How long an exec'd command's output may keep flowing after it exited (background children holding the pipes). */
const EXEC_DRAIN_MS = 300;

function shellQuote(arg: string): string {
  return `'${arg.replace(/'/g, `'\\''`)}'`;
}

export interface ExecTarget {
  pid: number;
  cgroupDir: string;
  env: Record<string, string>;
}

export function execInContainer(target: ExecTarget, command: string[], stdin: boolean, tty: boolean): ExecProcess {
  const argv = tty ? ['script', '-qfec', command.map(shellQuote).join(' '), '/dev/null'] : command;
  const child = spawn('/bin/sh', ['-c', EXEC_SCRIPT, 'sh', target.cgroupDir, String(target.pid), ...argv], {
    env: { ...target.env, ...(tty ? { TERM: target.env.TERM ?? 'xterm' } : {}) },
    stdio: [stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
  });
  child.stdin?.on('error', () => {});
  const done = new Promise<{ exitCode: number; signal?: string }>((resolve) => {
    child.once('error', () => resolve({ exitCode: 126 }));
    child.once('exit', (code, signal) => {
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
      // script(1) gives the command a terminal but offers no way to resize it from outside.
    },
    wait: () => done,
    kill: () => {
      try {
        child.kill('SIGKILL');
      } catch {
        // gone
      }
    },
  };
}
