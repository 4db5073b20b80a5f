// Error kinds and their one-line rendering: UserError shows message + hint, anything else is an internal error.
import { describe, expect, it } from 'vitest';
import { BugError, UserError, formatError, isUserError } from './errors.js';

describe('formatError', () => {
  it('prints a UserError as one line with its hint and no stack', () => {
    const err = new UserError('target deploy/x not found in namespace default', 'check the name with kubectl get deploy');
    expect(formatError(err)).toBe('devop: target deploy/x not found in namespace default — check the name with kubectl get deploy');
    expect(formatError(err, true)).not.toContain('at ');
  });

  it('prints a BugError or a plain error as an internal error, with the stack and causes only when verbose', () => {
    const bug = new BugError('stream id reused', { cause: new Error('root cause') });
    expect(formatError(bug)).toBe('devop: internal error: stream id reused (run again with --verbose for details, and please report it)');
    const verbose = formatError(bug, true);
    expect(verbose).toContain('BugError: stream id reused');
    expect(verbose).toMatch(/\n\s+at /);
    expect(verbose).toContain('caused by: Error: root cause');
    expect(formatError('a string')).toContain('internal error: a string');
  });

  it('recognises a UserError by shape too (e.g. from another copy of the module)', () => {
    const foreign = Object.assign(new Error('bad flag'), { name: 'UserError', hint: 'use --steal' });
    expect(isUserError(foreign)).toBe(true);
    expect(formatError(foreign)).toBe('devop: bad flag — use --steal');
    expect(isUserError(new Error('x'))).toBe(false);
  });
});
