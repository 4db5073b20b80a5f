// esbuild options shared by every bundle devop builds (scripts/build.mjs) and by the benchmark's bundled session.
import { fileURLToPath } from 'node:url';

export const common = {
  bundle: true,
  platform: 'node',
  target: 'node20',
  format: 'esm',
  sourcemap: 'linked',
  logLevel: 'warning',
  // jsonc-parser's main entry is a UMD module whose require() calls esbuild cannot follow (the bundle would look for
  // ./impl/*.js beside dist/cli.js): bundle its ES module build instead.
  // The kube client's fetch (node-fetch 2) imports whatwg-url only for a URL class that Node has: the bundles get
  // Node's (scripts/shims/whatwg-url.cjs), not whatwg-url and tr46's mapping table, evaluated at every start for
  // nothing.
  // Anything else needing punycode gets the userland package Node's own deprecated module was copied from.
  // node-fetch's and http-proxy's url.parse() prints a deprecation warning from Node 24 on, http-proxy's
  // util._extend() one from Node 22 on: scripts/shims/.
  // ws masks what the CLI sends with bufferutil's native code when it can load it (an optional dependency: prebuilt
  // for the common platforms; without it ws masks byte by byte in JavaScript, ~60 % of the CLI's CPU while it sends
  // through a port-forward). Bundled, its loader would look for the native file beside the bundle: it stays in
  // node_modules, and ws's require() of it, in a try, finds it there or goes on without it.
  external: ['bufferutil'],
  alias: {
    'jsonc-parser': 'jsonc-parser/lib/esm/main.js',
    punycode: 'punycode/punycode.js',
    url: fileURLToPath(new URL('./shims/url.cjs', import.meta.url)),
    util: fileURLToPath(new URL('./shims/util.cjs', import.meta.url)),
    'whatwg-url': fileURLToPath(new URL('./shims/whatwg-url.cjs', import.meta.url)),
  },
};
// ESM bundles that contain CommonJS dependencies need a require() of their own.
export const banner = {
  js:
    "import { createRequire as __devopCreateRequire } from 'node:module'; const require = " +
    '__devopCreateRequire(import.meta.url);',
};
