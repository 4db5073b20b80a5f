// Builds the one-file bundles (CLI, agent) once before any suite runs, so system tests exercise the shipped artifacts.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';

export default function setup(): void {
  if (!existsSync('scripts/build.mjs')) return;
  execFileSync(process.execPath, ['scripts/build.mjs'], { stdio: 'inherit' });
}
