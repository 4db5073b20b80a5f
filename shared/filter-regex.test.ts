// Filter patterns: RE2 syntax matched as RegExp.prototype.test would, refusals that name the problem and the fix, and
// the bounds on the pattern's size and on the text matched.
import { describe, expect, it } from 'vitest';
import type { UserError } from './errors.js';
import {
  compileFilterRegex,
  compileHeaderFilter,
  MAX_FILTER_INSTRUCTIONS,
  MAX_REQUEST_HEAD_BYTES,
} from './filter-regex.js';

function refusal(source: string): UserError {
  try {
    compileFilterRegex(source, '--http-path-filter');
  } catch (err) {
    return err as UserError;
  }
  throw new Error(`"${source}" was accepted`);
}

describe('filter patterns', () => {
  it('match anywhere in the text, as a RegExp without flags does', () => {
    const cases: Array<[string, string, boolean]> = [
      ['^alice$', 'alice', true],
      ['^alice$', 'alice2', false],
      ['^/api/v1/', '/api/v1/llamas?limit=5', true],
      ['llamas', '/api/v1/llamas', true],
      ['(?i)^ALICE', 'alice', true],
      ['\\d{3}', 'id-123', true],
      ['a.c', 'a\nc', false],
    ];
    for (const [source, text, matches] of cases) {
      expect(compileFilterRegex(source, 'p').test(text), `${source} on ${JSON.stringify(text)}`).toBe(matches);
    }
  });

  it('name what RE2 lacks (backreference, lookaround) and the fix', () => {
    expect(refusal('(a)\\1').message).toMatch(/"\(a\)\\1" uses a backreference, which filters do not support/);
    expect(refusal('(?<n>a)\\k<n>').message).toMatch(/uses a backreference/);
    expect(refusal('^/(?!admin)').message).toMatch(/uses a lookahead/);
    expect(refusal('(?<!x)y').message).toMatch(/uses a lookbehind/);
    expect(refusal('(a)\\1').hint).toBe(
      'rewrite the pattern given to --http-path-filter without it (RE2 syntax: no backreferences, no lookaround)',
    );
    expect(refusal('([').message).toMatch(/^--http-path-filter "\(\[" is not a valid regular expression \(missing/);
  });

  it('refuse a pattern too large to match against every request', () => {
    expect(() => compileFilterRegex('[a-z]{400}', 'p')).not.toThrow();
    expect(refusal('(\\w|\\s){900}[0-9]').message).toMatch(
      new RegExp(`too large for a filter \\(\\d+ RE2 instructions, at most ${MAX_FILTER_INSTRUCTIONS}\\)`),
    );
  });

  it('match no text longer than a request head may be', () => {
    const re = compileFilterRegex('^a', 'p');
    expect(re.test('a'.repeat(MAX_REQUEST_HEAD_BYTES))).toBe(true);
    expect(re.test('a'.repeat(MAX_REQUEST_HEAD_BYTES + 1))).toBe(false);
  });

  it('split a header filter into its lower-case name and value pattern, and name what is wrong', () => {
    const { name, value } = compileHeaderFilter('X-User: ^alice$', 'the header filter');
    expect(name).toBe('x-user');
    expect([value.test('alice'), value.test('bob')]).toEqual([true, false]);
    expect(() => compileHeaderFilter('x-user', 'the header filter')).toThrow(
      'the header filter "x-user" is not of the form "name: value-regex"',
    );
    expect(() => compileHeaderFilter('x-user: (a)\\1', 'the header filter')).toThrow(
      'the header filter "(a)\\1" uses a backreference',
    );
  });
});
