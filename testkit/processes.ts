// Node child processes for suites: run one to its end (stdin closed at once) with its output collected.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/** Where a child runs unless told otherwise: the repository root (paths in suites are relative to it). */
export const REPO_ROOT = fileURLToPath(new URL('../', import.meta.url));

export interface NodeResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Runs `node <args>`; fails (after a SIGKILL) when it has not ended within `timeoutMs` (default 60 s). */
export function runNode(
  args: string[],
  options: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {},
): Promise<NodeResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, {
      cwd: options.cwd ?? REPO_ROOT,
      env: options.env ?? process.env,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (text: string) => (stdout += text));
    child.stderr.setEncoding('utf8').on('data', (text: string) => (stderr += text));
    child.stdin.end();
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(
        new Error(
          `${args.join(' ')} did not end within ${options.timeoutMs ?? 60_000} ms\nstdout: ${stdout}\nstderr: ` +
            `${stderr}`,
        ),
      );
    }, options.timeoutMs ?? 60_000);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}
