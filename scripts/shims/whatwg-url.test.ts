// The bundles' `whatwg-url` (scripts/shims/whatwg-url.cjs) is Node's own URL, so the kube client's fetch bundles
// neither whatwg-url nor tr46 (whose mapping table every command that talks to the cluster evaluated at start).
import { createRequire } from 'node:module';
import { build } from 'esbuild';
import { describe, expect, it } from 'vitest';
import { common } from '../build-options.mjs';

const shim = createRequire(import.meta.url)('./whatwg-url.cjs') as { URL: typeof URL; URLSearchParams: unknown };

describe('the whatwg-url shim', () => {
  it("is Node's URL and URLSearchParams", () => {
    expect(shim.URL).toBe(URL);
    expect(shim.URLSearchParams).toBe(URLSearchParams);
  });

  it('keeps whatwg-url and tr46 out of a bundle of node-fetch, the kube client fetch', async () => {
    // Given node-fetch bundled with the options every devop bundle uses
    const result = await build({
      ...common,
      stdin: { contents: "export { default } from 'node-fetch';", resolveDir: process.cwd() },
      write: false,
      sourcemap: false,
      metafile: true,
      outfile: 'fetch.js',
    });
    // When we list the packages that went into it
    const inputs = Object.keys(result.metafile.inputs);
    // Then node-fetch is there and the URL packages are not
    expect(inputs.some((input) => input.includes('node_modules/node-fetch/'))).toBe(true);
    expect(inputs.filter((input) => /node_modules\/(whatwg-url|tr46)\//.test(input))).toEqual([]);
  });
});
