// esbuild options shared by every bundle devop builds (scripts/build.mjs) and by the benchmark's bundled session.
export const common = { bundle: true, platform: 'node', target: 'node20', format: 'esm', sourcemap: 'linked', logLevel: 'warning' };
// ESM bundles that contain CommonJS dependencies need a require() of their own.
export const banner = { js: "import { createRequire as __devopCreateRequire } from 'node:module'; const require = __devopCreateRequire(import.meta.url);" };
