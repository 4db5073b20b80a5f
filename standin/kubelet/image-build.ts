// Test images made on the spot: an image containerd already holds plus one layer of files (a fixture script, say), with
// its own entrypoint/cmd, imported under a new name — what `FROM base` + `COPY` + `docker push` would give a cluster.
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { normalizeImageRef } from '../images.js';
import { ctr } from './containerd.js';
import { run } from './host.js';

export interface ImageBuild {
  /** An image containerd has (e.g. devop.test/shell). */
  from: string;
  /** The new image's name. */
  ref: string;
  /** Absolute path in the image → content. */
  files: Record<string, string | Buffer>;
  entrypoint?: string[];
  cmd?: string[];
}

interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
}

function sha256(data: Buffer): string {
  return `sha256:${createHash('sha256').update(data).digest('hex')}`;
}

/** Builds and imports the image; resolves to its normalized reference. */
export async function buildImage(build: ImageBuild): Promise<string> {
  const base = normalizeImageRef(build.from);
  const ref = normalizeImageRef(build.ref);
  const line = (await ctr(['images', 'ls', `name==${base}`])).split('\n')[1]?.trim().split(/\s+/);
  if (!line?.[2]) throw new Error(`cannot build ${ref}: containerd has no image ${base}`);
  const manifest = JSON.parse(await ctr(['content', 'get', line[2]])) as { config: Descriptor; layers: Descriptor[] };
  const config = JSON.parse(await ctr(['content', 'get', manifest.config.digest])) as {
    config: Record<string, unknown>;
    rootfs: { diff_ids: string[] };
  };
  const work = mkdtempSync(join(tmpdir(), 'devop-image-'));
  try {
    const tree = join(work, 'tree');
    for (const [path, content] of Object.entries(build.files)) {
      mkdirSync(dirname(join(tree, path)), { recursive: true });
      writeFileSync(join(tree, path), content);
    }
    const layerPath = join(work, 'layer.tar');
    // Fixed owner and time: the same files give the same layer digest.
    await run('tar', ['-C', tree, '--owner=0', '--group=0', '--mtime=@0', '--sort=name', '-cf', layerPath, '.']);
    const layer = readFileSync(layerPath);
    const layerDesc = {
      mediaType: 'application/vnd.oci.image.layer.v1.tar',
      digest: sha256(layer),
      size: layer.length,
    };
    const newConfig = Buffer.from(
      JSON.stringify({
        ...config,
        config: {
          ...config.config,
          ...(build.entrypoint ? { Entrypoint: build.entrypoint } : {}),
          ...(build.cmd ? { Cmd: build.cmd } : {}),
        },
        rootfs: { type: 'layers', diff_ids: [...config.rootfs.diff_ids, layerDesc.digest] },
      }),
    );
    const configDesc = {
      mediaType: 'application/vnd.oci.image.config.v1+json',
      digest: sha256(newConfig),
      size: newConfig.length,
    };
    const newManifest = Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: 'application/vnd.oci.image.manifest.v1+json',
        config: configDesc,
        layers: [...manifest.layers, layerDesc],
      }),
    );
    const manifestDesc = {
      mediaType: 'application/vnd.oci.image.manifest.v1+json',
      digest: sha256(newManifest),
      size: newManifest.length,
    };
    // An OCI layout with the new blobs only: the base layers are in containerd's content store already.
    const layout = join(work, 'layout');
    const blobs = join(layout, 'blobs', 'sha256');
    mkdirSync(blobs, { recursive: true });
    for (const [desc, data] of [
      [layerDesc, layer],
      [configDesc, newConfig],
      [manifestDesc, newManifest],
    ] as const) {
      writeFileSync(join(blobs, desc.digest.slice('sha256:'.length)), data);
    }
    writeFileSync(join(layout, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
    const index = {
      schemaVersion: 2,
      manifests: [{ ...manifestDesc, annotations: { 'org.opencontainers.image.ref.name': ref } }],
    };
    writeFileSync(join(layout, 'index.json'), JSON.stringify(index));
    const archive = join(work, 'image.oci.tar');
    await run('tar', ['-C', layout, '-cf', archive, 'oci-layout', 'index.json', 'blobs']);
    await ctr(['images', 'import', archive], undefined, 600_000);
    return ref;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}
