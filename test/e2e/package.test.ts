// The published package: `npm pack` builds the bundles (prepack), the tarball holds what the command loads and no test
// code or sources, and a global install of it runs `devop` with nothing from this checkout (no tsx, no TypeScript).
import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT } from '../../testkit/e2e.js';

/** Packing runs the build; installing may fetch ink and react from the registry on a machine with a cold npm cache. */
const STEP_TIMEOUT_MS = 180_000;

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a command with npm's own variables removed, so an outer `npm test` cannot redirect the inner npm. */
function run(command: string, args: string[], cwd: string): Promise<Run> {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k)));
  return new Promise((done) => {
    execFile(command, args, { cwd, env, timeout: STEP_TIMEOUT_MS, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
      done({ code, stdout, stderr });
    });
  });
}

async function ok(command: string, args: string[], cwd: string): Promise<string> {
  const started = Date.now();
  const r = await run(command, args, cwd);
  if (r.code !== 0) {
    const took = `after ${((Date.now() - started) / 1000).toFixed(1)} s`;
    throw new Error(`${command} ${args.join(' ')} exited ${r.code} ${took}\n${r.stdout}\n${r.stderr}`);
  }
  return r.stdout;
}

describe('npm pack', () => {
  const version = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
  let dir: string;
  let tarball: string;
  let prefix: string;
  let entries: string[];

  beforeAll(
    async () => {
      // Given the package packed as `npm publish` would, from a copy of the checkout without dist/ (so prepack builds
      // it, and the other suites' dist/ is not rewritten under them), and installed globally into a fresh prefix
      dir = mkdtempSync(join(tmpdir(), 'devop-pack-'));
      const source = join(dir, 'source');
      const skipped = new Set(['node_modules', 'dist', '.git'].map((name) => join(ROOT, name)));
      cpSync(ROOT, source, { recursive: true, filter: (path) => !skipped.has(path) });
      symlinkSync(join(ROOT, 'node_modules'), join(source, 'node_modules'));
      await ok('npm', ['pack', '--pack-destination', dir], source);
      const packed = readdirSync(dir).filter((f) => /^devop-.*\.tgz$/.test(f));
      expect(packed).toHaveLength(1);
      tarball = join(dir, packed[0]);
      entries = (await ok('tar', ['tzf', tarball], dir)).split('\n').filter(Boolean);
      prefix = join(dir, 'prefix');
      const install = [
        'install',
        '--global',
        '--prefix',
        prefix,
        '--prefer-offline',
        '--no-audit',
        '--no-fund',
        // npm ci caches tarballs, not the registry's metadata, so resolving the tarball's dependencies fetches it. A
        // fetch that stalls is retried after 30 s (npm waits 5 minutes by default, beyond this step's bound), and a
        // failure shows every request npm made.
        '--fetch-timeout=30000',
        '--fetch-retries=4',
        '--loglevel=http',
        tarball,
      ];
      await ok('npm', install, dir);
      // Each step has its own bound (a step that takes longer fails with its output), so the two together get two.
    },
    2 * STEP_TIMEOUT_MS + 10_000,
  );

  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('holds the command, its bundles and the schema, and no tests, sources or source maps', () => {
    for (const file of ['bin/devop.js', 'dist/cli.js', 'dist/preload.js', 'devop.schema.json', 'README.md']) {
      expect(entries).toContain(`package/${file}`);
    }
    expect(
      entries.some((e) => /^package\/dist\/chunks\/exec-[A-Z0-9]+\.js$/.test(e)),
      entries.join('\n'),
    ).toBe(true);
    const sources = /^package\/(test|cli|agent|shared|scripts|bench|examples)\//;
    const unwanted = entries.filter((e) => /\.test\.|\.tsx?$|\.map$/.test(e) || sources.test(e));
    expect(unwanted).toEqual([]);
    // The agent's bundle goes into the agent image, not to the user's machine.
    expect(entries.filter((e) => e.startsWith('package/dist/agent.'))).toEqual([]);
  });

  it('installs globally and runs: --version is the package version, exec --help answers', async () => {
    // --version prints AGENT_VERSION, the tag of the default agent image (shared/agent-contract.ts;
    // shared/agent-contract.test.ts keeps it equal to package.json): the installed command asks for the agent image of
    // its own release.
    const devop = join(prefix, 'bin', 'devop');
    expect((await ok(devop, ['--version'], dir)).trim()).toBe(version);
    const help = await ok(devop, ['exec', '--help'], dir);
    expect(help).toMatch(/^Usage: devop exec /);
    expect(help).toContain('--agent-image');
  });

  it('installs neither tsx nor TypeScript, and the bundled libraries are not installed as dependencies', () => {
    const modules = join(prefix, 'lib', 'node_modules', 'devop', 'node_modules');
    const absent = ['tsx', 'typescript', 'esbuild', 'vitest', '@kubernetes/client-node', 'commander', 'zod', 'yaml'];
    for (const name of absent) {
      expect(existsSync(join(modules, name)), `${name} installed with devop`).toBe(false);
    }
  });

  it("the kube client's WebSocket loads bufferutil from the installed package: native masking", async () => {
    // bufferutil is an optional dependency kept out of the bundle (scripts/build-options.mjs): ws require()s it from
    // the chunk that holds ws, and masks what the CLI sends with its native code when it loads (prebuilt for
    // linux-x64, darwin and win32; elsewhere npm may build it, or ws masks in JavaScript).
    const chunks = join(prefix, 'lib', 'node_modules', 'devop', 'dist', 'chunks');
    const ws = readdirSync(chunks).filter((f) =>
      readFileSync(join(chunks, f), 'utf8').includes('require("bufferutil")'),
    );
    expect(ws).toHaveLength(1);
    const load = `const m = require('node:module').createRequire(${JSON.stringify(join(chunks, ws[0]))})('bufferutil');
      process.stdout.write(String(m.mask));`;
    const mask = await ok(process.execPath, ['-e', load], dir);
    const installed = join(prefix, 'lib', 'node_modules', 'devop', 'node_modules', 'bufferutil');
    if (existsSync(join(installed, 'prebuilds', `${process.platform}-${process.arch}`))) {
      expect(mask).toContain('[native code]');
    }
  });

  it('the terminal UI chunk loads ink and react from the installed package', async () => {
    // ink and react stay outside the bundle (scripts/build.mjs); the TUI imports them lazily, so load that chunk here.
    const chunks = join(prefix, 'lib', 'node_modules', 'devop', 'dist', 'chunks');
    const ui = readdirSync(chunks).find((f) => f.startsWith('ink-reporter-'));
    expect(ui, readdirSync(chunks).join('\n')).toBeDefined();
    const load = `await import(${JSON.stringify(join(chunks, ui!))})`;
    await ok(process.execPath, ['--input-type=module', '-e', load], dir);
  });
});
