#!/usr/bin/env node
// The devop command: runs the bundle that `npm run build` makes from cli/main.ts.
import { existsSync } from 'node:fs';
import module from 'node:module';
import { fileURLToPath } from 'node:url';

// Node 22.1 and later keep V8's compiled code of the bundle on disk (in Node's own directory, os.tmpdir()/
// node-compile-cache, or NODE_COMPILE_CACHE; NODE_DISABLE_COMPILE_CACHE=1 turns it off) and reuse it while the bundle
// is unchanged: every command after the first starts faster (docs/benchmarks.md). Earlier Nodes have no such call.
module.enableCompileCache?.();

const bundle = new URL('../dist/cli.js', import.meta.url);
if (!existsSync(fileURLToPath(bundle))) {
  process.stderr.write('devop: dist/cli.js is missing. Fix: run `npm run build` in the devop checkout.\n');
  process.exit(1);
}
await import(bundle.href);
