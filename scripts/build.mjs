// Builds dist/cli.js (the devop command) and dist/agent.cjs (one self-contained file that the agent image runs with
// nothing but Node, as /opt/devop/agent.js) with esbuild, and the agent's native helpers with cc:
// dist/devop-capture (the packet capture, agent/native/capture.c), dist/devop-nft (the owner of its nftables table,
// agent/native/nft-owner.c), dist/devop-splice (the data path of whole steals, agent/native/splice.c) and
// dist/devop-open (reads the target's files inside its root, agent/native/open-in-root.c); on Linux also
// dist/devop-outgoing.so, the LD_PRELOAD shim of `devop exec` (cli/native/outgoing-shim.c), and dist/devop-netns, the
// launcher of `devop exec --outgoing-netns` (cli/native/outgoing-netns.c).
// Type checking is `npm run typecheck`.
// The CLI bundles its npm packages too: loading one file instead of hundreds of node_modules files is most of devop's
// start-up time. ink and react stay external and load lazily (cli/ui/lazy-ink.ts, in a chunk of its own under
// dist/chunks/) only when a run draws the terminal UI.
import { build } from 'esbuild';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { basename } from 'node:path';

import { banner, common } from './build-options.mjs';

/**
 * Not bundled: the terminal UI's packages (loaded only with the TUI; ink resolves its own dependencies from
 * node_modules).
 */
const CLI_EXTERNAL = [...common.external, 'ink', 'react', 'react/*'];
/** The agent's native helpers: source → program next to dist/agent.cjs (where the agent looks for them), and what
 * the agent run from the checkout does without it. */
const NATIVE = {
  'agent/native/capture.c': ['dist/devop-capture', 'cannot mirror by capture'],
  'agent/native/nft-owner.c': ['dist/devop-nft', 'steals with the iptables fallback'],
  'agent/native/splice.c': ['dist/devop-splice', 'moves whole steals through Node'],
  'agent/native/open-in-root.c': ['dist/devop-open', 'cannot read files of the target'],
};
/**
 * As Dockerfile.agent compiles them. Static: devop-capture takes 0.7 MiB RSS where linked to glibc it takes 1.4
 * (measured, while capturing); devop-nft 0.7.
 */
const NATIVE_CFLAGS = ['-O2', '-Wall', '-Werror', '-static'];
/** The LD_PRELOAD shim for the local command's outgoing connections (source, library next to dist/cli.js). */
const OUTGOING_SHIM = ['cli/native/outgoing-shim.c', 'dist/devop-outgoing.so'];
/** libdl and libpthread are part of libc since glibc 2.34; named for older ones. */
const OUTGOING_SHIM_CFLAGS = ['-shared', '-fPIC', '-O2', '-Wall', '-Werror'];
const OUTGOING_SHIM_LIBS = ['-ldl', '-lpthread'];
/**
 * The launcher of `devop exec --outgoing-netns` (cli/native/outgoing-netns.c): linked to glibc, since it loads
 * libnftables at run time.
 */
const OUTGOING_NETNS = ['cli/native/outgoing-netns.c', 'dist/devop-netns'];
const OUTGOING_NETNS_CFLAGS = ['-O2', '-Wall', '-Werror'];

/**
 * The agent is a CommonJS bundle, which the image runs as /opt/devop/agent.js. CommonJS, because:
 * - Node's own modules come through require(), never as ES modules (the plugin below takes a dynamic import() of one
 *   there too, which esbuild would keep). The ES module view of a built-in module reads every export, the lazy ones
 *   too: node:crypto's loads Web Crypto, and from Node 22 node:http's loads undici and compiles its WebAssembly parser,
 *   which V8's lite mode (the agent's) does not have: an agent importing node:http would die at start on Node 22+. The
 *   CommonJS view reads nothing until used (test/agent/bundle.test.ts).
 * - In the image no package.json says what agent.js is: Node 24 compiled an ES module bundle twice there (as CommonJS,
 *   which failed, then as an ES module). A CommonJS bundle compiles once, and loads no ES module loader at all: the
 *   agent starts with 0.8 MiB less RSS than the ES module bundle did in the checkout, 1.4 less than in the image.
 * - Its legal comments go to dist/agent.cjs.LEGAL.txt (/opt/devop in the image): one non-Latin-1 character among them
 *   made V8 keep the bundle's whole source as a two-byte string (0.13 MiB more heap).
 */
const AGENT_BUILD = {
  entryPoints: ['agent/main.ts'],
  outfile: 'dist/agent.cjs',
  format: 'cjs',
  minify: true,
  legalComments: 'external',
  plugins: [
    {
      name: 'builtins-by-require',
      setup(b) {
        b.onResolve({ filter: /^node:/ }, (args) =>
          args.namespace === 'builtins-by-require'
            ? { path: args.path, external: true }
            : { path: args.path, namespace: 'builtins-by-require' },
        );
        b.onLoad({ filter: /.*/, namespace: 'builtins-by-require' }, (args) => ({
          contents: `module.exports = require(${JSON.stringify(args.path)});`,
          loader: 'js',
        }));
      },
    },
  ],
};

const jobs = [];
if (existsSync('cli/main.ts')) {
  jobs.push(
    build({
      ...common,
      entryPoints: { cli: 'cli/main.ts' },
      outdir: 'dist',
      // Code split at dynamic imports (the TUI): chunk names carry a content hash, so a rebuild never changes a chunk
      // that a running devop may still load.
      splitting: true,
      chunkNames: 'chunks/[name]-[hash]',
      external: CLI_EXTERNAL,
      banner,
      jsx: 'automatic',
      // Whitespace and syntax only (names stay, so stack traces read as the source; the source maps are linked): the
      // kube client's chunk is 7.5 MB as written and 3.1 MB minified, and every command that talks to the cluster
      // reads, decodes and (Node 20: no compile cache) compiles it: such a command boots 4-11 % sooner and peaks
      // 13-21 MiB lower (docs/benchmarks.md).
      minifyWhitespace: true,
      minifySyntax: true,
      metafile: true,
    }).then(removeStaleChunks),
  );
}
if (existsSync('cli/preload/outgoing.ts')) {
  jobs.push(build({ ...common, entryPoints: ['cli/preload/outgoing.ts'], outfile: 'dist/preload.js', banner }));
}
if (existsSync('agent/main.ts')) {
  jobs.push(build({ ...common, ...AGENT_BUILD }));
  // The bundle's name before it was CommonJS: a checkout built then must not keep running it.
  for (const stale of ['dist/agent.js', 'dist/agent.js.map']) rmSync(stale, { force: true });
}
await Promise.all(jobs);
for (const [source, [out, without]] of Object.entries(NATIVE))
  if (existsSync(source)) buildNative(source, out, without);
// The outgoing shim that `devop exec` preloads into dynamically linked local commands (cli/native/outgoing-shim.c): a
// glibc/Linux shared library, so only built on Linux. Without it exec says so once and those programs get the proxy
// env only.
if (process.platform === 'linux' && existsSync(OUTGOING_SHIM[0])) {
  buildNative(OUTGOING_SHIM[0], OUTGOING_SHIM[1], '', OUTGOING_SHIM_CFLAGS);
}
if (process.platform === 'linux' && existsSync(OUTGOING_NETNS[0])) {
  buildNative(OUTGOING_NETNS[0], OUTGOING_NETNS[1], '', OUTGOING_NETNS_CFLAGS);
}

/**
 * The agent image compiles the same files (Dockerfile.agent); these copies are for the agent run from the checkout
 * (tests, benches). Rebuilt only when the source is newer, and renamed into place: one may be running from the old
 * file. Without a C compiler the CLI still builds (npm pack needs only the bundles), with a warning.
 */
function buildNative(source, out, without, cflags = NATIVE_CFLAGS) {
  if (existsSync(out) && statSync(out).mtimeMs >= statSync(source).mtimeMs) return;
  const tmp = `${out}.${process.pid}`;
  const libs = cflags === OUTGOING_SHIM_CFLAGS || cflags === OUTGOING_NETNS_CFLAGS ? OUTGOING_SHIM_LIBS : [];
  try {
    execFileSync('cc', cflags.concat(['-o', tmp, source], libs), {
      stdio: ['ignore', 'inherit', 'pipe'],
    });
  } catch (err) {
    rmSync(tmp, { force: true });
    const why = err.code === 'ENOENT' ? 'no C compiler (cc)' : String(err.stderr ?? err.message).trim();
    const consequence = without ? `the agent run from this checkout ${without}` : 'devop exec runs without it';
    console.warn(`build: ${out} not built: ${why}; ${consequence}`);
    return;
  }
  renameSync(tmp, out);
}

/**
 * Chunks of earlier builds (other hashes) would pile up in dist/chunks with every source change: keep only this
 * build's.
 */
function removeStaleChunks(result) {
  const current = new Set(Object.keys(result.metafile.outputs).map((file) => basename(file)));
  for (const file of readdirSync('dist/chunks')) {
    if (!current.has(file)) rmSync(`dist/chunks/${file}`, { force: true });
  }
}
