// What the top-level handler prints for a failure: a UserError as the problem and its fix (no stack); anything else as
// its message and a pointer to -v (with -v: the stack).
import { isUserError } from '../../shared/errors.js';

export function formatTopLevelError(err: unknown, verbose: boolean): string {
  if (isUserError(err)) return `devop: ${err.message}\n  fix: ${err.hint}\n`;
  const message = err instanceof Error ? err.message : String(err);
  if (verbose) return `devop: ${err instanceof Error && err.stack ? err.stack : message}\n`;
  return `devop: ${message}\n  (run with -v for the stack)\n`;
}
