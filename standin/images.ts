// Image references as the stand-in's node sees them: normalized as Kubernetes does (busybox →
// docker.io/library/busybox:latest), so that a pod's image name finds the image containerd imported from the repo's
// archives (dist/images).
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository root (standin/images.ts → ..). */
export function repoRoot(): string {
  return resolve(dirname(fileURLToPath(import.meta.url)), '..');
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
 * The fully qualified reference containerd stores an image under, as the kubelet and containerd's CRI plugin make it:
 * a name without a registry is on docker.io (under library/ when it has no path), a missing tag is `latest`.
 */
export function normalizeImageRef(image: string): string {
  const { repository, tag } = parseImageRef(image);
  const first = repository.split('/')[0];
  const hasRegistry = repository.includes('/') && (first.includes('.') || first.includes(':') || first === 'localhost');
  const qualified = hasRegistry
    ? repository
    : repository.includes('/')
      ? `docker.io/${repository}`
      : `docker.io/library/${repository}`;
  return tag.startsWith('sha256:') ? `${qualified}@${tag}` : `${qualified}:${tag}`;
}
