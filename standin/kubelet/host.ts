// Runs the host tools the node is made of (ip, iptables, nsenter) and turns their failures into errors that name the
// command; builds the node's C helpers beside them.
import { execFile } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { UserError } from '../../shared/errors.js';

export class HostCommandError extends Error {
  constructor(
    readonly command: string,
    readonly code: number | string | null,
    readonly stderr: string,
  ) {
    super(`${command} failed (${code}): ${stderr.trim()}`);
  }
}

/**
 * Runs a command and resolves to its stdout; rejects with a HostCommandError carrying stderr (or on timeout, if any).
 */
export function run(cmd: string, args: string[], input?: string, timeoutMs = 0): Promise<string> {
  return new Promise((resolvePromise, reject) => {
    const child = execFile(cmd, args, { maxBuffer: 64 * 1024 * 1024, timeout: timeoutMs }, (err, stdout, stderr) => {
      if (err) {
        const code = (err as NodeJS.ErrnoException & { code?: number | string }).code ?? null;
        reject(new HostCommandError(`${cmd} ${args.join(' ')}`, code, String(stderr || err.message)));
      } else {
        resolvePromise(String(stdout));
      }
    });
    if (input !== undefined) child.stdin?.end(input);
  });
}

/** Like run, but a failure is ignored (teardown of something that may already be gone). */
export async function runQuiet(cmd: string, args: string[], timeoutMs = 0): Promise<boolean> {
  try {
    await run(cmd, args, undefined, timeoutMs);
    return true;
  } catch {
    return false;
  }
}

/** Runs `ip -batch -` with one command per line (one process for many link/addr/route changes). */
export function ipBatch(lines: string[]): Promise<string> {
  return run('ip', ['-batch', '-'], `${lines.join('\n')}\n`);
}

/**
 * Builds the node's C helper `<name>.c` (beside this file) with cc into `dir` (the instance's run directory) and
 * resolves to the executable's path: the shim and runc run it as a file, and a C process starts in a millisecond.
 */
export async function buildHelper(name: string, dir: string): Promise<string> {
  const path = join(dir, name);
  mkdirSync(dir, { recursive: true });
  const source = fileURLToPath(new URL(`./${name}.c`, import.meta.url));
  try {
    await run('cc', ['-O2', '-Wall', '-o', path, source]);
  } catch (err) {
    const why =
      (err as HostCommandError).code === 'ENOENT' ? 'no C compiler (cc)' : (err as Error).message.split('\n')[0];
    throw new UserError(`the stand-in cannot build its ${name}: ${why}`, 'run scripts/setup.sh (gcc, libc6-dev)');
  }
  return path;
}
