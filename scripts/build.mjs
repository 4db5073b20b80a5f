// Builds dist/cli.js (the devop command; npm packages stay external) and dist/agent.js (one self-contained file that the
// agent image runs with nothing but Node) with esbuild. Type checking is `npm run typecheck`.
import { build } from 'esbuild';
import { existsSync } from 'node:fs';

const common = { bundle: true, platform: 'node', target: 'node20', format: 'esm', sourcemap: 'linked', logLevel: 'warning' };
// ESM bundles that contain CommonJS dependencies need a require() of their own.
const banner = { js: "import { createRequire as __devopCreateRequire } from 'node:module'; const require = __devopCreateRequire(import.meta.url);" };

const jobs = [];
if (existsSync('cli/main.ts')) {
  jobs.push(build({ ...common, entryPoints: ['cli/main.ts'], outfile: 'dist/cli.js', packages: 'external', jsx: 'automatic' }));
}
if (existsSync('cli/preload/outgoing.ts')) {
  jobs.push(build({ ...common, entryPoints: ['cli/preload/outgoing.ts'], outfile: 'dist/preload.js', banner }));
}
if (existsSync('agent/main.ts')) {
  jobs.push(build({ ...common, entryPoints: ['agent/main.ts'], outfile: 'dist/agent.js', banner, minify: true }));
}
await Promise.all(jobs);
