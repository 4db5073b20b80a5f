// Unit tests of filtered steals' HTTP filters: what they match, and the user errors of bad ones.
import { describe, expect, test } from 'vitest';
import { compileFilter, describeFilter } from './filter.js';

describe('HTTP filters', () => {
  const head = (method: string, url: string, headers: Record<string, string> = {}) => ({ method, url, headers });
  test('header regex (name case-insensitive), path regex and method; all-of and any-of', () => {
    const all = compileFilter({ header: 'X-User: ^alice$', path: '^/api/', match: 'all' });
    expect(all(head('GET', '/api/x', { 'x-user': 'alice' }))).toBe(true);
    expect(all(head('GET', '/other', { 'x-user': 'alice' }))).toBe(false);
    expect(all(head('GET', '/api/x', { 'x-user': 'alicex' }))).toBe(false);
    const any = compileFilter({ path: '^/a', method: 'delete', match: 'any' });
    expect(any(head('DELETE', '/zzz'))).toBe(true);
    expect(any(head('GET', '/abc'))).toBe(true);
    expect(any(head('GET', '/zzz'))).toBe(false);
    expect(describeFilter({ header: 'x: y', method: 'GET', match: 'any' })).toBe('header x: y or method GET');
  });
  test('bad filters are user errors naming the fix', () => {
    expect(() => compileFilter({ path: '([', match: 'all' })).toThrow(/not a valid regular expression/);
    expect(() => compileFilter({ header: 'novalue', match: 'all' })).toThrow(/name: value-regex/);
    expect(() => compileFilter({ match: 'all' })).toThrow(/no header, path, method or body/);
  });
});
