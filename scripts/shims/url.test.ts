// The bundles' `url` (scripts/shims/url.cjs) parses as Node's url.parse() does. That it prints no warning is checked on
// the built CLI (test/ui/usage.test.ts).
import { createRequire } from 'node:module';
import url from 'node:url';
import { describe, expect, it } from 'vitest';

const shim = createRequire(import.meta.url)('./url.cjs') as typeof url;

describe('the url shim', () => {
  it('parse() gives what url.parse() gives, for what node-fetch and http-proxy pass it', () => {
    const inputs = [
      'https://10.96.0.1:443/api/v1/namespaces/default/pods?labelSelector=app%3Decho&watch=true',
      'https://user:p%40ss@[::1]:6443/apis/farm.example.com/v1/llamas#frag',
      'http://EXAMPLE.com./a/../b/./c?x=1&x=2',
      '/healthz?verbose',
      '//host/path',
      'unix:/var/run/socket',
      '',
    ];
    for (const input of inputs) {
      expect({ ...shim.parse(input) }).toEqual({ ...url.parse(input) });
      expect({ ...shim.parse(input, true) }).toEqual({ ...url.parse(input, true) });
      expect({ ...shim.parse(input, false, true) }).toEqual({ ...url.parse(input, false, true) });
    }
    const parsed = url.parse('https://a/b');
    expect(shim.parse(parsed as unknown as string)).toBe(parsed);
  });

  it('keeps the rest of Node url module', () => {
    expect(shim.URL).toBe(url.URL);
    expect(shim.format).toBe(url.format);
    expect(shim.fileURLToPath('file:///tmp/x')).toBe('/tmp/x');
  });
});
