// The stand-in's image table: which local command a container image runs (there is no registry and no container engine).
import { createHash } from 'node:crypto';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { exampleImages } from '../../examples/images.js';

/** What an image would carry: entrypoint + cmd (Docker semantics), working directory and env. */
export interface ImageSpec {
  entrypoint: string[];
  cmd: string[];
  workingDir?: string;
  env?: Record<string, string>;
}

/** The repository root (test/cluster/images.ts → ../..). */
export function repoRoot(): string {
  return resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
}

/** Splits an image reference into repository (registry/path, docker.io/library/ dropped) and tag/digest. */
export function parseImageRef(image: string): { repository: string; tag: string } {
  let ref = image.trim();
  let tag = 'latest';
  const at = ref.indexOf('@');
  if (at >= 0) {
    tag = ref.slice(at + 1);
    ref = ref.slice(0, at);
  } else {
    const colon = ref.lastIndexOf(':');
    if (colon > ref.lastIndexOf('/')) {
      tag = ref.slice(colon + 1);
      ref = ref.slice(0, colon);
    }
  }
  for (const prefix of ['docker.io/library/', 'docker.io/', 'index.docker.io/library/']) {
    if (ref.startsWith(prefix)) ref = ref.slice(prefix.length);
  }
  return { repository: ref, tag };
}

/**
 * Maps image references to local commands. A key is a repository (any tag matches) or `repository:tag` (that tag only).
 * Tests add entries with `add`; the kubelet resolves at container start, so entries added after start count.
 */
export class ImageTable {
  private readonly entries = new Map<string, ImageSpec>();

  constructor(initial: Record<string, ImageSpec> = {}) {
    for (const [key, spec] of Object.entries(initial)) this.add(key, spec);
  }

  add(key: string, spec: ImageSpec): this {
    this.entries.set(key, spec);
    return this;
  }

  resolve(image: string): ImageSpec | undefined {
    const { repository, tag } = parseImageRef(image);
    return this.entries.get(`${repository}:${tag}`) ?? this.entries.get(repository);
  }

  keys(): string[] {
    return [...this.entries.keys()];
  }
}

/** A stable fake digest so status.imageID looks like a runtime's (`repo@sha256:…`). */
export function imageID(image: string): string {
  const { repository } = parseImageRef(image);
  return `${repository}@sha256:${createHash('sha256').update(repository).digest('hex')}`;
}

/** The images every stand-in knows: the HTTP echo server, the devop agent bundle, a shell, and the examples' images (so the
 * README walkthrough runs on `npm run cluster`). */
export function defaultImages(root: string = repoRoot()): ImageTable {
  const node = process.execPath;
  const shell: ImageSpec = { entrypoint: [], cmd: ['/bin/sh'] };
  const agent: ImageSpec = { entrypoint: [node, join(root, 'dist', 'agent.js')], cmd: [] };
  return new ImageTable({
    'devop.test/http-echo': { entrypoint: [node, join(root, 'test', 'cluster', 'images', 'http-echo.mjs')], cmd: [] },
    'devop.test/agent': agent,
    'ghcr.io/devop/agent': agent,
    busybox: shell,
    'devop.test/shell': shell,
    ...exampleImages(root, node),
  });
}
