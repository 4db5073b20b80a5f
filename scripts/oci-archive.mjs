// Reads and writes OCI image archives (a tar of an OCI layout, as `buildah push oci-archive:` writes): their image
// references, layers and sizes, and one archive holding several images with each blob once. Used by scripts/images.mjs
// and by the images test to check what the archives hold.
import { execFileSync } from 'node:child_process';
import {
  constants,
  copyFileSync,
  createReadStream,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createGunzip } from 'node:zlib';

/** Unpacks `archive` into a temporary directory, calls `use` with it, and removes the directory. */
export async function withUnpackedArchive(archive, use) {
  const dir = mkdtempSync(join(tmpdir(), 'devop-oci-'));
  try {
    execFileSync('tar', ['-xf', archive, '-C', dir]);
    return await use(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const blobPath = (dir, digest) => join(dir, 'blobs', ...digest.split(':'));
const readJson = (path) => JSON.parse(readFileSync(path, 'utf8'));
const REF_NAME = 'org.opencontainers.image.ref.name';
const INDEX_TYPES = [
  'application/vnd.oci.image.index.v1+json',
  'application/vnd.docker.distribution.manifest.list.v2+json',
];

/** Reference → manifest digest of what `archive` names (its index.json alone); empty when there is no archive. */
export function archiveRefs(archive) {
  if (!existsSync(archive)) return new Map();
  const index = JSON.parse(
    execFileSync('tar', ['-xOf', archive, '--occurrence=1', 'index.json'], { encoding: 'utf8' }),
  );
  return new Map(
    index.manifests.filter((m) => m.annotations?.[REF_NAME]).map((m) => [m.annotations[REF_NAME], m.digest]),
  );
}

/** Every blob an image (or index) descriptor needs: itself, and its manifests', configs' and layers' blobs. */
function blobsOf(dir, descriptor, into) {
  into.add(descriptor.digest);
  const doc = readJson(blobPath(dir, descriptor.digest));
  if (INDEX_TYPES.includes(descriptor.mediaType ?? doc.mediaType)) {
    for (const child of doc.manifests) blobsOf(dir, child, into);
    return into;
  }
  for (const child of [doc.config, ...doc.layers]) into.add(child.digest);
  return into;
}

/**
 * Rewrites `archive` (made when missing) to name the images of `layouts` (OCI layout directories, as `buildah push
 * oci:DIR:REF` writes) in place of what it named under the same references, and to drop every reference not in
 * `keep`. Each blob is stored once, whichever images name it: images built on one base share its layers in the
 * archive. Blobs no image names any more are left out. The archive is replaced at once (a reader never sees half).
 */
export function updateArchive(archive, layouts, keep) {
  const dir = mkdtempSync(join(tmpdir(), 'devop-oci-'));
  try {
    if (existsSync(archive)) execFileSync('tar', ['-xf', archive, '-C', dir]);
    else writeFileSync(join(dir, 'oci-layout'), `${JSON.stringify({ imageLayoutVersion: '1.0.0' })}\n`);
    const indexPath = join(dir, 'index.json');
    const index = existsSync(indexPath) ? readJson(indexPath) : { schemaVersion: 2, manifests: [] };
    const added = [];
    for (const layout of layouts) {
      for (const file of readdirSync(join(layout, 'blobs', 'sha256'))) {
        const target = join(dir, 'blobs', 'sha256', file);
        mkdirSync(join(dir, 'blobs', 'sha256'), { recursive: true });
        if (!existsSync(target))
          copyFileSync(join(layout, 'blobs', 'sha256', file), target, constants.COPYFILE_FICLONE);
      }
      added.push(...readJson(join(layout, 'index.json')).manifests);
    }
    const replaced = new Set(added.map((m) => m.annotations?.[REF_NAME]));
    index.manifests = [...index.manifests.filter((m) => !replaced.has(m.annotations?.[REF_NAME])), ...added]
      .filter((m) => keep.includes(m.annotations?.[REF_NAME]))
      .sort((a, b) => a.annotations[REF_NAME].localeCompare(b.annotations[REF_NAME]));
    const needed = new Set();
    for (const m of index.manifests) blobsOf(dir, m, needed);
    for (const file of readdirSync(join(dir, 'blobs', 'sha256'))) {
      if (!needed.has(`sha256:${file}`)) rmSync(join(dir, 'blobs', 'sha256', file));
    }
    writeFileSync(indexPath, JSON.stringify(index));
    // index.json near the start: archiveRefs stops reading there.
    execFileSync('tar', ['-cf', `${archive}.tmp`, '-C', dir, '--sort=name', 'oci-layout', 'index.json', 'blobs']);
    renameSync(`${archive}.tmp`, archive);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * The image references of an unpacked archive (index.json's ref.name annotations) and, per reference, its manifest's
 * config and layer list (each layer's blob path, gzip size and media type).
 */
export function describeLayout(dir) {
  const index = readJson(join(dir, 'index.json'));
  return index.manifests.map((entry) => {
    const manifest = readJson(blobPath(dir, entry.digest));
    return {
      ref: entry.annotations?.['org.opencontainers.image.ref.name'],
      digest: entry.digest,
      config: readJson(blobPath(dir, manifest.config.digest)),
      layers: manifest.layers.map((layer) => ({
        path: blobPath(dir, layer.digest),
        size: layer.size,
        mediaType: layer.mediaType,
      })),
    };
  });
}

/** Bytes of a layer once gunzipped (a layer that is not gzip-compressed counts as it is). */
export async function layerSize(layer) {
  if (!layer.mediaType.endsWith('+gzip')) return statSync(layer.path).size;
  let total = 0;
  for await (const chunk of createReadStream(layer.path).pipe(createGunzip())) total += chunk.length;
  return total;
}

/**
 * The image's size: `uncompressed` is the sum of its layer tars (what `docker images` and `buildah images` show, give
 * or take tar headers), `gzip` the sum of the compressed layers (what a registry pull transfers).
 */
export async function imageSizes(image) {
  let uncompressed = 0;
  for (const layer of image.layers) uncompressed += await layerSize(layer);
  return { uncompressed, gzip: image.layers.reduce((sum, layer) => sum + layer.size, 0) };
}

/**
 * The paths a container of this image sees (no leading `./` or `/`), from its layers in order with whiteouts applied:
 * a map from path to the tar type letter (`-` file, `d` directory, `l` symlink, `h` hard link).
 */
export function imageFiles(image) {
  const files = new Map();
  for (const layer of image.layers) {
    const listing = execFileSync('tar', ['-tvf', layer.path], { encoding: 'utf8', maxBuffer: 256 * 1024 * 1024 });
    for (const line of listing.split('\n')) {
      // `-rwxr-xr-x 0/0 98932688 2026-01-01 00:00 ./usr/local/bin/node` (links end in ` -> target`/` link to target`).
      const m = /^(\S)\S*\s+\S+\s+\d+\s+\S+\s+\S+\s+(.*?)(?: -> .*| link to .*)?$/.exec(line);
      if (!m) continue;
      const path = m[2].replace(/^\.?\//, '').replace(/\/$/, '');
      const base = path.slice(path.lastIndexOf('/') + 1);
      const dir = path.slice(0, path.lastIndexOf('/') + 1);
      if (base === '.wh..wh..opq') {
        for (const key of files.keys()) if (key.startsWith(dir)) files.delete(key);
      } else if (base.startsWith('.wh.')) {
        const gone = dir + base.slice(4);
        for (const key of files.keys()) if (key === gone || key.startsWith(`${gone}/`)) files.delete(key);
      } else if (path) {
        files.set(path, m[1]);
      }
    }
  }
  return files;
}

export function formatMB(bytes) {
  return `${(bytes / 1e6).toFixed(1)} MB`;
}
