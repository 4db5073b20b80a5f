// Runs the host tools the node is made of (ip, iptables, nsenter) and turns their failures into errors that name the
// command.
import { execFile } from 'node:child_process';

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
