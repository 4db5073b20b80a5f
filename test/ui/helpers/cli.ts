// Runs the built devop CLI (bin/devop.js → dist/cli.js, built by vitest's globalSetup) as a child process with pipes.
import { join } from 'node:path';
import { REPO_ROOT, runNode } from '../../../testkit/processes.js';

export { REPO_ROOT };
export const DEVOP_BIN = join(REPO_ROOT, 'bin', 'devop.js');

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

/** ESC, CSI and OSC introducers: none may appear in output meant for pipes and logs. */
// eslint-disable-next-line no-control-regex
export const ESCAPE_CODES = /\u001b|\u009b|\u009d/;
