// What the top-level handler prints for a failure: one line — a UserError as `devop: <problem> — fix: <hint>` (no
// stack), anything else as an internal error with a pointer to -v (with -v: the stack on the lines that follow).
import { formatError } from '../../shared/errors.js';

export function formatTopLevelError(err: unknown, verbose: boolean): string {
  return `${formatError(err, verbose)}\n`;
}
