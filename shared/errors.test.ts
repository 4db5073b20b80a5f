// Error kinds and their one-line rendering: UserError shows message + hint, anything else is an internal error.
import { describe, expect, it } from 'vitest';
import { BugError, UserError, formatError, isUserError } from './errors.js';

describe('formatError', () => {
  it('prints a UserError as one line with its hint and no stack', () => {
    const err = new UserError(
      'target deploy/x not found in namespace default',
      'check the name with kubectl get deploy',
    );
    expect(formatError(err)).toBe(
      'devop: target deploy/x not found in namespace default — fix: check the name with kubectl get deploy',
    );
    expect(formatError(err, true)).not.toContain('at ');
  });

  it('names the start-up step a UserError carries, as the reporter error lines do', () => {
    const err = Object.assign(
      new UserError('the API server https://127.0.0.1:6443 did not answer within 30 s', 'raise --request-timeout'),
      {
        step: 'resolve target deploy/x',
      },
    );
    expect(formatError(err)).toBe(
      'devop: error [resolve target deploy/x]: the API server https://127.0.0.1:6443 did not answer within 30 s — ' +
        'fix: raise --request-timeout',
    );
  });

  it('prints a BugError or a plain error as an internal error, with the stack and causes only when verbose', () => {
    const bug = new BugError('stream id reused', { cause: new Error('root cause') });
    expect(formatError(bug)).toBe('devop: internal error: stream id reused — run with -v for the stack');
    const verbose = formatError(bug, true);
    expect(verbose).toContain('BugError: stream id reused');
    expect(verbose).toMatch(/\n\s+at /);
    expect(verbose).toContain('caused by: Error: root cause');
    expect(formatError('a string')).toContain('internal error: a string');
  });

  it('keeps a message that spans lines on one line', () => {
    const err = new UserError(
      'the API server answered 500:\n  {"kind":"Status"}\n',
      "retry, or check the API server's logs",
    );
    expect(formatError(err)).toBe(
      'devop: the API server answered 500: {"kind":"Status"} — fix: retry, or check the API server\'s logs',
    );
    expect(formatError(new Error('HTTP-Code: 500\nMessage: boom'))).toBe(
      'devop: internal error: HTTP-Code: 500 Message: boom — run with -v for the stack',
    );
  });

  it('recognises a UserError by shape too (e.g. from another copy of the module)', () => {
    const foreign = Object.assign(new Error('bad flag'), { name: 'UserError', hint: 'use --steal' });
    expect(isUserError(foreign)).toBe(true);
    expect(formatError(foreign)).toBe('devop: bad flag — fix: use --steal');
    expect(isUserError(new Error('x'))).toBe(false);
  });
});
