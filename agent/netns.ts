// Job mode's entry into the target pod's network namespace outside the agent image (its entry point, agent/entry.sh,
// execs the agent there instead): the agent re-runs itself under `nsenter -t PID -n` and stays as a thin parent that
// forwards signals; the child watches a pipe so that it ends when the parent dies.
import { spawn } from 'node:child_process';
import { Socket } from 'node:net';
import { constants } from 'node:os';
import { AGENT_ENV } from '../shared/agent-contract.js';
import type { AgentLog } from './log.js';

/** File descriptor of the parent-liveness pipe in the re-executed agent. */
export const PARENT_PIPE_FD = 3;

/** Runs this agent again inside the netns of `pid`; resolves with the child's exit code. */
export function reenterNetns(pid: number, log: AgentLog): Promise<number> {
  const script = process.argv[1];
  // Two malloc arenas are plenty for one event loop and keep RSS down (the image sets the same; this covers other
  // runtimes).
  const env = {
    MALLOC_ARENA_MAX: '2',
    ...process.env,
    [AGENT_ENV.inNetns]: 'true',
    [AGENT_ENV.targetPid]: String(pid),
    [AGENT_ENV.parentPipe]: String(PARENT_PIPE_FD),
  };
  const child = spawn('nsenter', ['-t', String(pid), '-n', '--', process.execPath, ...process.execArgv, script], {
    env,
    stdio: ['ignore', 'inherit', 'inherit', 'pipe'],
  });
  log.debug('entering target netns', { pid });
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.on(signal, () => child.kill(signal));
  return new Promise((resolve) => {
    child.once('error', (err) => {
      log.error('cannot run nsenter', { error: err.message });
      resolve(1);
    });
    child.once('exit', (code, signal) => resolve(code ?? (signal ? 128 + (constants.signals[signal] ?? 0) : 1)));
  });
}

/** In the re-executed agent: calls `onGone` when the parent (holder of the pipe's other end) is gone. */
export function watchParent(fd: number, onGone: () => void): void {
  const pipe = new Socket({ fd, readable: true, writable: false });
  pipe.on('error', onGone);
  pipe.on('end', onGone);
  pipe.on('close', onGone);
  pipe.resume();
  pipe.unref();
}
