// The JSON body filter's syntax, what its path finds in a body, and which content types it reads.
import { describe, expect, it } from 'vitest';
import { bodyMatches, bodyValueAt, compileBodyFilter, isJsonContentType } from './body-filter.js';

describe('the JSON body filter', () => {
  it('Given a path with keys and indexes, Then it names the value there; a missing one is nothing', () => {
    const body = { user: { name: 'alice', 'dotted.key': 1 }, items: [{ kind: 'Llama' }], n: 3, ok: true, z: null };
    expect(compileBodyFilter('$.user.name: x', 'f').path).toEqual(['user', 'name']);
    expect(compileBodyFilter('items[0].kind: x', 'f').path).toEqual(['items', 0, 'kind']);
    expect(compileBodyFilter('$.user["dotted.key"]: x', 'f').path).toEqual(['user', 'dotted.key']);
    expect(bodyValueAt(body, ['user', 'name'])).toBe('alice');
    expect(bodyValueAt(body, ['items', 0, 'kind'])).toBe('Llama');
    expect(bodyValueAt(body, ['n'])).toBe('3');
    expect(bodyValueAt(body, ['ok'])).toBe('true');
    expect(bodyValueAt(body, ['z'])).toBe('null');
    expect(bodyValueAt(body, ['user'])).toBe('{"name":"alice","dotted.key":1}');
    expect(bodyValueAt(body, ['items', 1])).toBeUndefined();
    expect(bodyValueAt(body, ['items', 'kind'])).toBeUndefined();
    expect(bodyValueAt(body, ['user', 'toString'])).toBeUndefined();
    expect(bodyValueAt('text', ['user'])).toBeUndefined();
  });

  it('Given "path: regex", Then the value at the path is matched as RE2, unanchored', () => {
    const filter = compileBodyFilter('$.user.name: ^ali', 'f');
    expect(bodyMatches(filter, { user: { name: 'alice' } })).toBe(true);
    expect(bodyMatches(filter, { user: { name: 'bob' } })).toBe(false);
    expect(bodyMatches(filter, { user: {} })).toBe(false);
    expect(bodyMatches(compileBodyFilter('n: ^4[0-9]$', 'f'), { n: 42 })).toBe(true);
  });

  it('Given a filter that is not "json-path: regex", Then one line names it and the form', () => {
    for (const bad of ['no colon', ': ^a', '$.a..b: x', '$.a[x]: x', '$: x'])
      expect(() => compileBodyFilter(bad, '--http-body-filter')).toThrow(
        `--http-body-filter "${bad}" is not "json-path: regex"`,
      );
    expect(() => compileBodyFilter('$.a: (a)\\1', '--http-body-filter')).toThrow(/backreference/);
  });

  it('reads JSON content types only', () => {
    expect(isJsonContentType('application/json')).toBe(true);
    expect(isJsonContentType('Application/JSON; charset=utf-8')).toBe(true);
    expect(isJsonContentType('application/merge-patch+json')).toBe(true);
    expect(isJsonContentType('text/plain')).toBe(false);
    expect(isJsonContentType(undefined)).toBe(false);
  });
});
