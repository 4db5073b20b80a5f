// Runs the built devop CLI (bin/devop.js → dist/cli.js, built by vitest's globalSetup) as a child process with pipes.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));
export const DEVOP_BIN = fileURLToPath(new URL('../../../bin/devop.js', import.meta.url));

export interface CliResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export function runCli(
  args: string[],
  options: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {},
): Promise<CliResult> {
  return runNode([DEVOP_BIN, ...args], options);
}

export function runNode(
  args: string[],
  options: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {},
): Promise<CliResult> {
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

/** ESC, CSI and OSC introducers: none may appear in output meant for pipes and logs. */
// eslint-disable-next-line no-control-regex
export const ESCAPE_CODES = /\u001b|\u009b|\u009d/;
