// Chooses the Reporter for a run: Ink when interactive (stdin and stdout are TTYs and CI is not set), else Plain; JSON
// and Plain on request; Null for library use. The only module the commands import from cli/ui/. Ink (and react) load
// lazily, only for a run that draws the TUI (lazy-ink.ts).
import type { Reporter } from '../reporter.js';
import { JsonReporter } from './json.js';
import { LazyInkReporter } from './lazy-ink.js';
import { NullReporter } from './null.js';
import { PlainReporter } from './plain.js';
import type { OutputMode } from './output-modes.js';

export { OUTPUT_MODES, type OutputMode } from './output-modes.js';

export interface CreateReporterOptions {
  output: OutputMode | 'null';
  verbose: boolean;
  stdout?: NodeJS.WriteStream;
  stderr?: NodeJS.WriteStream;
  stdin?: NodeJS.ReadStream;
  env?: NodeJS.ProcessEnv;
}

/** Interactive means stdin and stdout are terminals and CI is not set (STYLE.md). */
export function isInteractive(
  stdin: { isTTY?: boolean },
  stdout: { isTTY?: boolean },
  env: NodeJS.ProcessEnv,
): boolean {
  const ci = env.CI;
  const inCi = ci !== undefined && ci !== '' && ci !== '0' && ci.toLowerCase() !== 'false';
  return Boolean(stdin.isTTY) && Boolean(stdout.isTTY) && !inCi;
}

export function createReporter(options: CreateReporterOptions): Reporter {
  const stdout = options.stdout ?? process.stdout;
  const stderr = options.stderr ?? process.stderr;
  const stdin = options.stdin ?? process.stdin;
  const env = options.env ?? process.env;
  switch (options.output) {
    case 'null':
      return new NullReporter();
    case 'json':
      return new JsonReporter({ stdout, verbose: options.verbose });
    case 'plain':
      return new PlainReporter({ stdout, stderr, verbose: options.verbose });
    case 'auto':
      return isInteractive(stdin, stdout, env)
        ? new LazyInkReporter({ stdout, stderr, stdin, verbose: options.verbose })
        : new PlainReporter({ stdout, stderr, verbose: options.verbose });
  }
}

export { LazyInkReporter } from './lazy-ink.js';
export { JsonReporter } from './json.js';
export { NullReporter } from './null.js';
export { PlainReporter } from './plain.js';
export { READY_LINE, BEGINS_PATTERN, ENDS_PATTERN, ERROR_PATTERN } from './lines.js';
