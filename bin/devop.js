#!/usr/bin/env node
// The devop command: runs the bundle that `npm run build` makes from cli/main.ts.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const bundle = new URL('../dist/cli.js', import.meta.url);
if (!existsSync(fileURLToPath(bundle))) {
  process.stderr.write('devop: dist/cli.js is missing. Fix: run `npm run build` in the devop checkout.\n');
  process.exit(1);
}
await import(bundle.href);
