// esbuild options shared by every bundle devop builds (scripts/build.mjs) and by the benchmark's bundled session.
export const common = {
  bundle: true,
  platform: 'node',
  target: 'node20',
  format: 'esm',
  sourcemap: 'linked',
  logLevel: 'warning',
  // jsonc-parser's main entry is a UMD module whose require() calls esbuild cannot follow (the bundle would look for
  // ./impl/*.js beside dist/cli.js): bundle its ES module build instead.
  alias: { 'jsonc-parser': 'jsonc-parser/lib/esm/main.js' },
};
// ESM bundles that contain CommonJS dependencies need a require() of their own.
export const banner = {
  js:
    "import { createRequire as __devopCreateRequire } from 'node:module'; const require = " +
    '__devopCreateRequire(import.meta.url);',
};
