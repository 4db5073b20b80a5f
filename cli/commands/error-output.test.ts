// The top-level error output: one line, problem + fix for a UserError, an internal-error line with a -v pointer (or the
// stack) for anything else.
import { describe, expect, it } from 'vitest';
import { BugError, UserError } from '../../shared/errors.js';
import { formatTopLevelError } from './error-output.js';

describe('top-level error output', () => {
  it('prints a UserError as one line: the problem and the fix, without a stack', () => {
    expect(
      formatTopLevelError(new UserError('namespace "x" not found', 'pass an existing namespace with -n'), true),
    ).toBe('devop: namespace "x" not found — fix: pass an existing namespace with -n\n');
  });

  it('prints other errors as one line with a pointer to -v, and the stack under -v', () => {
    const bug = new BugError('invariant broken');
    expect(formatTopLevelError(bug, false)).toBe(
      'devop: internal error: invariant broken — run with -v for the stack\n',
    );
    const verbose = formatTopLevelError(bug, true);
    expect(verbose).toMatch(/^devop: internal error: BugError: invariant broken\n {4}at /);
  });
});
