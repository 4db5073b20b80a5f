// pods/exec's backend: `ctr tasks exec` runs a command in a running container's task — its namespaces, cgroup, user,
// env, capabilities and working directory come from the container's spec, as with CRI's ExecSync/Exec. With tty, ctr
// gets a terminal from script(1) (ctr only allocates one for a terminal it runs in).
import { randomBytes } from 'node:crypto';
import { spawn } from 'node:child_process';
import type { ExecProcess } from '../node-runtime.js';
import { ctrArgv, ctrQuiet } from './containerd.js';

/** How long an exec'd command's output may keep flowing after it exited (background children holding the pipes). */
const EXEC_DRAIN_MS = 300;

function shellQuote(arg: string): string {
  return `'${arg.replace(/'/g, `'\\''`)}'`;
}

export function execInContainer(containerID: string, command: string[], stdin: boolean, tty: boolean): ExecProcess {
  const execID = `exec-${randomBytes(6).toString('hex')}`;
  const argv = ctrArgv(['tasks', 'exec', '--exec-id', execID, ...(tty ? ['--tty'] : []), containerID, ...command]);
  // exec: script(1) runs the line with $SHELL, and a non-interactive sh left in between would take the pty's signals.
  const [cmd, ...args] = tty ? ['script', '-qfec', `exec ${argv.map(shellQuote).join(' ')}`, '/dev/null'] : argv;
  const child = spawn(cmd, args, {
    env: { ...process.env, ...(tty ? { TERM: process.env.TERM ?? 'xterm' } : {}) },
    stdio: [stdin || tty ? 'pipe' : 'ignore', 'pipe', 'pipe'],
  });
  child.stdin?.on('error', () => undefined); // EPIPE after the command exited
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
      // script(1) gives ctr a terminal but offers no way to resize it from outside.
    },
    wait: () => done,
    kill: () => {
      // The exec'd process lives in the container, not under ctr: containerd kills it.
      void ctrQuiet(['tasks', 'kill', '--exec-id', execID, '-s', 'SIGKILL', containerID]);
      child.kill('SIGKILL');
    },
  };
}
