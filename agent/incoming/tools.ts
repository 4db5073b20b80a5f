// Runs the agent's helper programs (iptables, conntrack, ss) and says clearly when one is missing or fails.
import { execFile } from 'node:child_process';
import { UserError } from '../../shared/errors.js';

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a program; resolves with its exit code and output (never rejects on a non-zero exit). */
export function run(file: string, args: readonly string[], input?: string): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = execFile(file, args, { maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
      if (err && (err as NodeJS.ErrnoException).code === 'ENOENT') {
        reject(
          new UserError(
            `${file} is not installed in the agent's image`,
            'use the devop agent image (it ships iptables, conntrack, iproute2 and util-linux)',
          ),
        );
        return;
      }
      const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
      resolve({ code, stdout: String(stdout), stderr: String(stderr) });
    });
    if (input !== undefined) child.stdin?.end(input);
  });
}

/** Runs a program and rejects with its stderr when it fails. */
export async function runOk(file: string, args: readonly string[], input?: string): Promise<string> {
  const res = await run(file, args, input);
  if (res.code !== 0) throw new Error(`${file} ${args.join(' ')} failed (${res.code}): ${res.stderr.trim()}`);
  return res.stdout;
}
