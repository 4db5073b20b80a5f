// The local command: spawned with the session's env, stdio inherited (or piped to the reporter), devop's signals
// forwarded to it, and its end reported as an exit code (128 + signal number when a signal killed it).
import { spawn, type ChildProcess } from 'node:child_process';
import { constants } from 'node:os';
import { UserError } from '../../shared/errors.js';

export const FORWARDED_SIGNALS: readonly NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];

export interface ChildExit {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** What devop exits with: the code, or 128 + the signal's number. */
  exitCode: number;
}

export interface LocalCommand {
  child: ChildProcess;
  /** Resolves when the command has ended. */
  exited: Promise<ChildExit>;
  /** Sends a signal (default SIGTERM); after graceMs, SIGKILL if it is still running. */
  stop(signal?: NodeJS.Signals, graceMs?: number): Promise<ChildExit>;
}

export function exitCodeFor(code: number | null, signal: NodeJS.Signals | null): number {
  if (code !== null) return code;
  if (signal) return 128 + (constants.signals[signal] ?? 0);
  return 1;
}

export interface StartCommandOptions {
  command: string;
  args: readonly string[];
  env: Record<string, string>;
  cwd?: string;
  /** Pipe stdout/stderr (for reporters that show the output themselves) instead of inheriting. */
  pipeOutput: boolean;
  onOutput?: (stream: 'stdout' | 'stderr', text: string) => void;
}

/** Spawns the command; rejects with a one-line UserError when it cannot be started (not found, not executable). */
export async function startLocalCommand(options: StartCommandOptions): Promise<LocalCommand> {
  const child = spawn(options.command, [...options.args], {
    env: options.env,
    cwd: options.cwd,
    stdio: options.pipeOutput ? ['inherit', 'pipe', 'pipe'] : 'inherit',
  });
  await new Promise<void>((resolve, reject) => {
    child.once('spawn', resolve);
    child.once('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') {
        reject(new UserError(`command not found: ${options.command}`, 'check the command after `--` (is it installed and on your PATH?)', { cause: err }));
      } else if (err.code === 'EACCES') {
        reject(new UserError(`cannot run ${options.command}: permission denied`, 'make the file executable (chmod +x) or run it through its interpreter', { cause: err }));
      } else {
        reject(new UserError(`cannot start ${options.command}: ${err.message}`, 'check the command after `--`', { cause: err }));
      }
    });
  });
  if (options.pipeOutput) {
    child.stdout?.setEncoding('utf8').on('data', (text: string) => options.onOutput?.('stdout', text));
    child.stderr?.setEncoding('utf8').on('data', (text: string) => options.onOutput?.('stderr', text));
  }
  const exited = new Promise<ChildExit>((resolve) => {
    child.once('exit', (code, signal) => resolve({ code, signal, exitCode: exitCodeFor(code, signal) }));
  });
  const forward = (signal: NodeJS.Signals): void => {
    if (child.exitCode === null && child.signalCode === null) child.kill(signal);
  };
  const handlers = FORWARDED_SIGNALS.map((signal) => {
    // Ctrl-C in a terminal already reaches the whole foreground process group, the command included: a second SIGINT
    // from devop would look like a double Ctrl-C (many programs then quit without cleaning up).
    const handler = (): void => {
      if (signal === 'SIGINT' && process.stdin.isTTY) return;
      forward(signal);
    };
    process.on(signal, handler);
    return { signal, handler };
  });
  void exited.then(() => {
    for (const { signal, handler } of handlers) process.off(signal, handler);
  });
  return {
    child,
    exited,
    async stop(signal: NodeJS.Signals = 'SIGTERM', graceMs = 5000): Promise<ChildExit> {
      forward(signal);
      const timer = setTimeout(() => forward('SIGKILL'), graceMs);
      try {
        return await exited;
      } finally {
        clearTimeout(timer);
      }
    },
  };
}
