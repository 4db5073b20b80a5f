// The built CLI (dist/, made by vitest's globalSetup) loads no npm package at start, and ink/react only through the
// TUI's dynamic import: what makes `devop exec` start fast (scripts/build.mjs, lazy-ink.ts).
import { readFileSync, statSync } from 'node:fs';
import { isBuiltin } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const DIST = resolve('dist');
/** `import … from "x"` / `import "x"` (also spread over lines, or minified: `import{a}from"x"`); not `import("x")`. */
const STATIC_IMPORT = /(?:^|[;\n])\s*import\s*(?:[^'"();]*?from\s*)?["']([^"']+)["']/g;
const DYNAMIC_IMPORT = /\bimport\(\s*["']([^"']+)["']\s*\)/g;

interface Graph {
  files: string[];
  packages: Set<string>;
  dynamic: Set<string>;
}

/** Every file that loading `entry` evaluates (static imports, transitively), and the bare specifiers they import. */
function staticGraph(entry: string): Graph {
  const graph: Graph = { files: [], packages: new Set(), dynamic: new Set() };
  const queue = [entry];
  while (queue.length > 0) {
    const file = queue.shift() as string;
    if (graph.files.includes(file)) continue;
    graph.files.push(file);
    const text = readFileSync(file, 'utf8');
    for (const [, spec] of text.matchAll(STATIC_IMPORT)) {
      if (spec.startsWith('.')) queue.push(join(dirname(file), spec));
      else graph.packages.add(spec);
    }
    for (const [, spec] of text.matchAll(DYNAMIC_IMPORT)) {
      if (spec.startsWith('.')) graph.dynamic.add(join(dirname(file), spec));
    }
  }
  return graph;
}

describe('the built CLI bundle', () => {
  it('loads only Node built-ins at start: the npm packages are bundled, ink and react are not loaded', () => {
    // Given the bundle that `npm run build` made
    // When we follow what loading dist/cli.js evaluates
    const graph = staticGraph(join(DIST, 'cli.js'));
    // Then nothing outside it but Node's own modules is loaded
    expect(graph.files.length).toBeGreaterThan(0);
    expect([...graph.packages].filter((spec) => !isBuiltin(spec))).toEqual([]);
  });

  it('reaches ink and react only through the terminal UI chunk, loaded on demand', () => {
    // Given every chunk that the CLI imports on demand (one per command, and the TUI's), at any depth
    const onDemand = new Map<string, Graph>();
    const queue = [...staticGraph(join(DIST, 'cli.js')).dynamic];
    while (queue.length > 0) {
      const file = queue.shift() as string;
      if (onDemand.has(file)) continue;
      const graph = staticGraph(file);
      onDemand.set(file, graph);
      queue.push(...graph.dynamic);
    }
    // When we look for the ones that load ink
    const tui = [...onDemand.values()].filter((graph) => graph.packages.has('ink'));
    // Then only the TUI's chunk does (with react), and every other chunk loads only Node's own modules
    expect(tui.map((graph) => graph.files[0]?.replace(/-[A-Z0-9]+\.js$/, ''))).toEqual([
      join(DIST, 'chunks', 'ink-reporter'),
    ]);
    expect(tui[0]?.packages.has('react')).toBe(true);
    const others = [...onDemand.values()].filter((graph) => !graph.packages.has('ink'));
    expect(others.length).toBeGreaterThanOrEqual(7);
    for (const graph of others) expect([...graph.packages].filter((spec) => !isBuiltin(spec))).toEqual([]);
  });

  it("evaluates for `devop --help` only the commands' registrations: no kube client, a fraction of the bundle", () => {
    // Given the bundle, and what `devop --help` evaluates: dist/cli.js and every command's chunk (cli/main.ts loads
    // all nine to list them), each with what it imports statically
    const entry = staticGraph(join(DIST, 'cli.js'));
    const files = new Set(entry.files);
    for (const command of entry.dynamic) for (const file of staticGraph(command).files) files.add(file);
    // When we look for the kube client's chunk (its KubeConfig class; names stay in the bundle) and weigh the rest
    const kubeClient = [...files].filter((file) => /\bKubeConfig\s*=\s*class\b/.test(readFileSync(file, 'utf8')));
    const kib = [...files].reduce((sum, file) => sum + statSync(file).size, 0) / 1024;
    // Then the help loads none of it (the run's code loads in each command's action), and stays far below the 3.1 MB
    // kube client chunk that it used to evaluate through the reporter's timeout error (docs/benchmarks.md)
    expect(entry.dynamic.size).toBe(9);
    expect(kubeClient).toEqual([]);
    expect(kib).toBeLessThan(512);
  });
});
