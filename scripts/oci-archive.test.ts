// updateArchive (scripts/oci-archive.mjs), the archive `npm run images` shares among images: each blob stored once
// whichever images name it, a rebuilt image replacing only its own references, and what no image names dropped.
// Small OCI layouts made here stand in for `buildah push oci:` output, so it runs without buildah or root.
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { archiveRefs, describeLayout, updateArchive, withUnpackedArchive } from './oci-archive.mjs';

const MANIFEST = 'application/vnd.oci.image.manifest.v1+json';
const LAYER = 'application/vnd.oci.image.layer.v1.tar+gzip';
const REF_NAME = 'org.opencontainers.image.ref.name';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'devop-oci-test-'));
  dirs.push(dir);
  return dir;
}

function putBlob(dir: string, content: string): { digest: string; size: number } {
  const hex = createHash('sha256').update(content).digest('hex');
  mkdirSync(join(dir, 'blobs', 'sha256'), { recursive: true });
  writeFileSync(join(dir, 'blobs', 'sha256', hex), content);
  return { digest: `sha256:${hex}`, size: Buffer.byteLength(content) };
}

/** An OCI layout naming one image (its layers' contents given) under each of `refs`, as `buildah push oci:` makes. */
function layout(refs: string[], layers: string[]): string {
  const dir = tempDir();
  writeFileSync(join(dir, 'oci-layout'), '{"imageLayoutVersion": "1.0.0"}');
  const layerDescs = layers.map((content) => ({ mediaType: LAYER, ...putBlob(dir, content) }));
  const config = {
    mediaType: 'application/vnd.oci.image.config.v1+json',
    ...putBlob(dir, JSON.stringify({ os: 'linux', architecture: 'amd64', config: { Env: [] }, layers })),
  };
  const manifest = putBlob(dir, JSON.stringify({ schemaVersion: 2, mediaType: MANIFEST, config, layers: layerDescs }));
  const manifests = refs.map((ref) => ({ mediaType: MANIFEST, ...manifest, annotations: { [REF_NAME]: ref } }));
  writeFileSync(join(dir, 'index.json'), JSON.stringify({ schemaVersion: 2, manifests }));
  return dir;
}

const digestOf = (content: string) => createHash('sha256').update(content).digest('hex');

/** The archive's references (→ their layers' contents' digests) and every blob file it holds. */
function contents(archive: string): Promise<{ refs: Map<string, string[]>; blobs: string[] }> {
  return withUnpackedArchive(archive, (dir: string) => ({
    refs: new Map(
      describeLayout(dir).map((image) => [
        image.ref ?? '',
        image.layers.map((l) => l.path.slice(l.path.lastIndexOf('/') + 1)),
      ]),
    ),
    blobs: readdirSync(join(dir, 'blobs', 'sha256')).sort(),
  }));
}

describe('updateArchive: one archive for images that share a base', () => {
  it('stores the base layer once for two images built on it, and names each image under its references', async () => {
    // Given two images on one base layer, one of them under two references
    const archive = join(tempDir(), 'shared.oci.tar');
    const a = layout(['example.test/a:1', 'example.test/a-alias:1'], ['base', 'a']);
    const b = layout(['example.test/b:1'], ['base', 'b']);
    // When both go into a new archive
    updateArchive(archive, [a, b], ['example.test/a:1', 'example.test/a-alias:1', 'example.test/b:1']);
    // Then it names all three references, and holds the base layer once among its 7 blobs (2 manifests, 2 configs,
    // 3 layers)
    const { refs, blobs } = await contents(archive);
    expect([...refs.keys()].sort()).toEqual(['example.test/a-alias:1', 'example.test/a:1', 'example.test/b:1']);
    expect(refs.get('example.test/a:1')).toEqual([digestOf('base'), digestOf('a')]);
    expect(refs.get('example.test/b:1')).toEqual([digestOf('base'), digestOf('b')]);
    expect(blobs.filter((f) => f === digestOf('base'))).toHaveLength(1);
    expect(blobs).toHaveLength(7);
  });

  it('replaces a rebuilt image under its own references only, and drops the blobs nothing names any more', async () => {
    // Given an archive holding a and b on one base
    const archive = join(tempDir(), 'shared.oci.tar');
    const keep = ['example.test/a:1', 'example.test/b:1'];
    updateArchive(
      archive,
      [layout(['example.test/a:1'], ['base', 'a']), layout(['example.test/b:1'], ['base', 'b'])],
      keep,
    );
    const bBefore = archiveRefs(archive).get('example.test/b:1');
    // When a is rebuilt with another top layer and only it goes into the archive (npm run images -- a)
    updateArchive(archive, [layout(['example.test/a:1'], ['base', 'a2'])], keep);
    // Then a names its new layers, b is the same manifest as before, and a's old layer is gone
    const { refs, blobs } = await contents(archive);
    expect(refs.get('example.test/a:1')).toEqual([digestOf('base'), digestOf('a2')]);
    expect(archiveRefs(archive).get('example.test/b:1')).toBe(bBefore);
    expect(blobs).toContain(digestOf('base'));
    expect(blobs).not.toContain(digestOf('a'));
    expect(blobs).toHaveLength(7);
  });

  it('drops a reference no image of the archive names any more, with the blobs only it used', async () => {
    // Given an archive holding a and b on one base
    const archive = join(tempDir(), 'shared.oci.tar');
    const a = layout(['example.test/a:1'], ['base', 'a']);
    updateArchive(archive, [a, layout(['example.test/b:1'], ['base', 'b'])], ['example.test/a:1', 'example.test/b:1']);
    // When b leaves the list of images and a is rebuilt as it was
    updateArchive(archive, [a], ['example.test/a:1']);
    // Then the archive names a alone, still on the base layer, and b's layer and config are gone
    const { refs, blobs } = await contents(archive);
    expect([...refs.keys()]).toEqual(['example.test/a:1']);
    expect(blobs).toContain(digestOf('base'));
    expect(blobs).not.toContain(digestOf('b'));
    expect(blobs).toHaveLength(4);
  });
});
