// The local command: spawned with the session's env, stdio inherited (or piped to the reporter), in a process group
// of its own so that devop's signals reach every process under it (npx → tsx → node), never outliving devop; its end
// is reported as an exit code (128 + signal number when a signal killed it, 0 when devop stopped it).
import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { constants } from 'node:os';
import { UserError } from '../../shared/errors.js';

export const FORWARDED_SIGNALS: readonly NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];

/**
 * Between a stop signal and SIGKILL to what is left of the command's group: long enough for a server to finish its
 * requests and a controller to release its leader Lease, short enough that a stop still feels prompt.
 */
export const STOP_GRACE_MS = 5000;

/** After the command's processes have ended, how long its piped output may take to arrive (a pipe drains in ms). */
const OUTPUT_DRAIN_MS = 1000;

/** How often the group is checked while devop waits for it to end: often enough that devop exits right after it. */
const GROUP_POLL_MS = 50;

/** Process groups and /bin/sh: everywhere but Windows, where devop signals only the command's own process. */
const GROUPS = process.platform !== 'win32';

/**
 * After SIGKILL, how long devop waits to see the group gone: SIGKILL takes effect in ms, but a process stuck in the
 * kernel (state D) ends only when its I/O does, and devop does not wait for that.
 */
const AFTER_KILL_WAIT_MS = 1000;

/**
 * The lifeline: a shell outside the command's group that reads a pipe from devop. It starts before the command, and its
 * first line is the command's group id, written as soon as the command is spawned: a kill -9 of devop at any moment
 * after that finds the lifeline in place. When devop has ended the group itself it writes a second line, and the
 * lifeline exits. When the pipe closes without one, devop died (kill -9, a crash): the lifeline sends SIGTERM to the
 * group and, 1.5 s later, SIGKILL to what is left — shorter than STOP_GRACE_MS, since nothing reports what the command
 * does any more, yet enough to close connections.
 */
const LIFELINE_SCRIPT = [
  // No group id: devop ended before it started the command.
  'read -r pgid || exit 0',
  'read -r _ && exit 0',
  'kill -TERM "-$pgid" 2>/dev/null || exit 0',
  'i=0',
  'while [ "$i" -lt 15 ]; do sleep 0.1; kill -0 "-$pgid" 2>/dev/null || exit 0; i=$((i + 1)); done',
  'kill -KILL "-$pgid" 2>/dev/null',
].join('\n');

export interface ChildExit {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** Whether the command ended after devop asked it to stop (a signal to devop, the TUI's q, an error). */
  stoppedByDevop: boolean;
  /** What devop exits with: the code, or 128 + the signal's number; 0 when devop stopped the command and it obeyed. */
  exitCode: number;
}

export interface LocalCommand {
  child: ChildProcess;
  /** Resolves when the command and every process left in its group have ended. */
  exited: Promise<ChildExit>;
  /** Sends a signal (default SIGTERM) to the command's group; after graceMs, SIGKILL to what is left. */
  stop(signal?: NodeJS.Signals, graceMs?: number): Promise<ChildExit>;
}

export function exitCodeFor(code: number | null, signal: NodeJS.Signals | null): number {
  if (code !== null) return code;
  if (signal) return 128 + (constants.signals[signal] ?? 0);
  return 1;
}

/** Codes a command conventionally exits with when a stop signal ended it (130 for SIGINT, 143 for SIGTERM, …). */
const STOP_CODES = new Set([...FORWARDED_SIGNALS, 'SIGKILL' as const].map((s) => 128 + constants.signals[s]));

/**
 * devop's exit code. When devop stopped the command, ending by the signal (or with its conventional code, or 0) is the
 * normal end of the session: 0. Any other code is the command failing while it stopped, and is passed on.
 */
export function exitCodeAfter(code: number | null, signal: NodeJS.Signals | null, stoppedByDevop: boolean): number {
  const exitCode = exitCodeFor(code, signal);
  return stoppedByDevop && (signal !== null || STOP_CODES.has(exitCode)) ? 0 : exitCode;
}

export interface StartCommandOptions {
  command: string;
  args: readonly string[];
  env: Record<string, string>;
  cwd?: string;
  /** Pipe stdout/stderr (for reporters that show the output themselves) instead of inheriting. */
  pipeOutput: boolean;
  onOutput?: (stream: 'stdout' | 'stderr', text: string) => void;
  /** Between a stop signal and SIGKILL (default STOP_GRACE_MS). */
  graceMs?: number;
}

/** Spawns the command; rejects with a one-line UserError when it cannot be started (not found, not executable). */
export async function startLocalCommand(options: StartCommandOptions): Promise<LocalCommand> {
  const graceMs = options.graceMs ?? STOP_GRACE_MS;
  const lifeline = GROUPS ? startLifeline() : { watch: () => undefined, end: () => undefined };
  // detached: a new session, so the command leads a process group of its own that devop can signal as a whole, and
  // that a terminal's Ctrl-C does not reach directly (devop passes it on, once). stdin stays the terminal: a process
  // of another session may still read it (no SIGTTIN, which only stops background groups of the terminal's session).
  const child = spawn(options.command, [...options.args], {
    env: options.env,
    cwd: options.cwd,
    stdio: options.pipeOutput ? ['inherit', 'pipe', 'pipe'] : 'inherit',
    detached: GROUPS,
  });
  // At once, in the same turn as the spawn: from here on a kill -9 of devop ends the command's group.
  if (child.pid !== undefined) lifeline.watch(child.pid);
  await new Promise<void>((resolve, reject) => {
    child.once('spawn', resolve);
    child.once('error', (err: NodeJS.ErrnoException) => {
      lifeline.end();
      if (err.code === 'ENOENT') {
        reject(
          new UserError(
            `command not found: ${options.command}`,
            'check the command after `--` (is it installed and on your PATH?)',
            { cause: err },
          ),
        );
      } else if (err.code === 'EACCES') {
        reject(
          new UserError(
            `cannot run ${options.command}: permission denied`,
            'make the file executable (chmod +x) or run it through its interpreter',
            { cause: err },
          ),
        );
      } else {
        reject(
          new UserError(`cannot start ${options.command}: ${err.message}`, 'check the command after `--`', {
            cause: err,
          }),
        );
      }
    });
  });
  const pgid = child.pid!;
  const send = (name: NodeJS.Signals): void => {
    if (GROUPS) signalGroup(pgid, name);
    else if (child.exitCode === null && child.signalCode === null) child.kill(name);
  };
  if (options.pipeOutput) {
    child.stdout?.setEncoding('utf8').on('data', (text: string) => options.onOutput?.('stdout', text));
    child.stderr?.setEncoding('utf8').on('data', (text: string) => options.onOutput?.('stderr', text));
  }
  let stoppedByDevop = false;
  let killTimer: NodeJS.Timeout | undefined;
  const directExit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('exit', (code, signal) => resolve({ code, signal }));
  });
  const outputClosed = new Promise<void>((resolve) => child.once('close', () => resolve()));
  const exited = directExit.then(async ({ code, signal }): Promise<ChildExit> => {
    // The command's own process is gone; what it started (a server behind `npx`, a `&` in a script) must not
    // outlive it.
    if (GROUPS) await endGroup(pgid, graceMs);
    // Piped output may still be in flight after 'exit': report the end after the last of it. Bounded, since a process
    // that left the group (its own setsid) may hold the pipes open.
    let drainTimer: NodeJS.Timeout | undefined;
    await Promise.race([outputClosed, new Promise((r) => (drainTimer = setTimeout(r, OUTPUT_DRAIN_MS)))]);
    clearTimeout(drainTimer);
    clearTimeout(killTimer);
    lifeline.end();
    return { code, signal, stoppedByDevop, exitCode: exitCodeAfter(code, signal, stoppedByDevop) };
  });
  const stop = async (name: NodeJS.Signals = 'SIGTERM', grace = graceMs): Promise<ChildExit> => {
    if (child.exitCode === null && child.signalCode === null) {
      stoppedByDevop = true;
      send(name);
      killTimer ??= setTimeout(() => send('SIGKILL'), grace);
    }
    return exited;
  };
  const handlers = FORWARDED_SIGNALS.map((signal) => {
    const handler = (): void => void stop(signal);
    process.on(signal, handler);
    return { signal, handler };
  });
  void exited.then(() => {
    for (const { signal, handler } of handlers) process.off(signal, handler);
  });
  return { child, exited, stop };
}

/**
 * Starts the lifeline; `watch(pgid)` hands it the command's group, `end()` tells it that devop has ended the group (or
 * never started it): it exits, killing nothing.
 */
function startLifeline(): { watch(pgid: number): void; end(): void } {
  // detached: its own session, so neither a terminal's Ctrl-C nor a signal to devop's group ends it before devop.
  const lifeline = spawn('/bin/sh', ['-c', LIFELINE_SCRIPT, 'devop-lifeline'], {
    detached: true,
    stdio: ['pipe', 'ignore', 'ignore'],
  });
  // Without /bin/sh there is no guard against kill -9 of devop; everything else (signals, normal ends) still works.
  lifeline.on('error', () => undefined);
  // EPIPE when the lifeline was killed: it only matters that the pipe is open while devop runs.
  lifeline.stdin?.on('error', () => undefined);
  // The lifeline must not keep devop running; the pipe closes when devop exits.
  lifeline.unref();
  (lifeline.stdin as unknown as { unref?: () => void } | null)?.unref?.();
  let watching = false;
  return {
    watch: (pgid) => {
      watching = true;
      lifeline.stdin?.write(`${pgid}\n`);
    },
    // Before a group id, the end of the pipe alone ends it; after one, a line says the group was ended by devop.
    end: () => lifeline.stdin?.end(watching ? 'ended\n' : undefined),
  };
}

function signalGroup(pgid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pgid, signal);
  } catch {
    // ESRCH: the whole group has ended already.
  }
}

/** SIGTERM to what is left of the group, SIGKILL after graceMs; resolves when no process of it is alive (bounded). */
async function endGroup(pgid: number, graceMs: number): Promise<void> {
  if (!groupAlive(pgid)) return;
  signalGroup(pgid, 'SIGTERM');
  if (await groupEnds(pgid, graceMs)) return;
  signalGroup(pgid, 'SIGKILL');
  await groupEnds(pgid, AFTER_KILL_WAIT_MS);
}

async function groupEnds(pgid: number, withinMs: number): Promise<boolean> {
  const deadline = Date.now() + withinMs;
  while (Date.now() < deadline) {
    if (!groupAlive(pgid)) return true;
    await new Promise((r) => setTimeout(r, GROUP_POLL_MS));
  }
  return !groupAlive(pgid);
}

/** Whether a process of the group still runs. Zombies do not count: they hold no port and no lock. */
export function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
  // The group exists, but maybe only as zombies: orphans wait for PID 1 to reap them, and in a container PID 1 often
  // never does. Linux shows each process's state and group in /proc; elsewhere (macOS: launchd reaps) trust kill.
  return process.platform === 'linux' ? liveMemberOnLinux(pgid) : true;
}

function liveMemberOnLinux(pgid: number): boolean {
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((name) => /^\d+$/.test(name));
  } catch {
    // No /proc (unusual mount): the kill check above said the group exists.
    return true;
  }
  for (const pid of pids) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    } catch {
      // The process ended between the listing and the read.
      continue;
    }
    // "pid (comm) state ppid pgrp …": comm may hold spaces and parentheses, so fields are counted after the last ')'.
    const [state, , pgrp] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(pgrp) === pgid && state !== 'Z' && state !== 'X') return true;
  }
  return false;
}
