// Reads an OCI image archive (the tar `buildah push oci-archive:` writes): its image references, layers and sizes.
// Used by scripts/images.mjs to report sizes and by the images test to check what the archives hold.
import { execFileSync } from 'node:child_process';
import { createReadStream, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
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
