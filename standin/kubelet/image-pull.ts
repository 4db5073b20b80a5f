// The kubelet's image manager on the stand-in's node: imagePullPolicy, the pull, its per-image back-off, and the events
// and waiting reasons they give (kubernetes pkg/kubelet/images/image_manager.go EnsureImageExists, pkg/kubelet/events).
// No registry is reachable: a pull succeeds when containerd holds the image (from the archives the node imported, or
// one loaded since with `npm run cluster:load`), and fails as containerd's pull of an unknown reference does.
import type { V1Container, V1EphemeralContainer, V1Pod } from '@kubernetes/client-node';
import { normalizeImageRef } from '../images.js';
import type { ImageInfo, ImageStore } from './containerd.js';

/**
 * The pull back-off: the kubelet's starts at 10 s and doubles up to 300 s (kubelet.go: imageBackOffPeriod,
 * MaxImageBackOff); the stand-in's is a tenth of that, so that tests see several rounds.
 */
export const IMAGE_BACKOFF_INITIAL_MS = 1_000;
export const IMAGE_BACKOFF_MAX_MS = 30_000;

/** client-go util/flowcontrol Backoff, as the image manager uses it: per key, doubling, forgotten after 2 × max. */
export class PullBackOff {
  private readonly entries = new Map<string, { backoffMs: number; lastUpdate: number }>();

  constructor(
    private readonly initialMs = IMAGE_BACKOFF_INITIAL_MS,
    private readonly maxMs = IMAGE_BACKOFF_MAX_MS,
  ) {}

  isInBackOffSinceUpdate(key: string, now: number): boolean {
    const entry = this.entries.get(key);
    if (!entry || now - entry.lastUpdate > this.maxMs * 2) return false;
    return now - entry.lastUpdate < entry.backoffMs;
  }

  next(key: string, now: number): void {
    const entry = this.entries.get(key);
    if (!entry || now - entry.lastUpdate > this.maxMs * 2)
      this.entries.set(key, { backoffMs: this.initialMs, lastUpdate: now });
    else this.entries.set(key, { backoffMs: Math.min(entry.backoffMs * 2, this.maxMs), lastUpdate: now });
  }

  delete(key: string): void {
    this.entries.delete(key);
  }
}

export type PullOutcome =
  | { kind: 'image'; image: ImageInfo }
  | { kind: 'error'; reason: 'ErrImagePull' | 'ImagePullBackOff' | 'ErrImageNeverPull'; message: string };

type Event = (type: 'Normal' | 'Warning', reason: string, message: string) => void;

/** What containerd answers a pull of a reference no registry serves, and where the stand-in's images come from. */
export function pullError(image: string): string {
  const ref = normalizeImageRef(image);
  return (
    `rpc error: code = NotFound desc = failed to pull and unpack image "${ref}": failed to resolve reference ` +
    `"${ref}": ${ref}: not found (the stand-in has no registry: load the image's OCI archive into the node with ` +
    'npm run cluster:load -- <archive>, or put it in dist/images / $DEVOP_IMAGES_DIR — npm run images builds them)'
  );
}

/** EnsureImageExists: the image to run, or the waiting reason and message the container shows. */
export async function ensureImageExists(
  pod: V1Pod,
  container: V1Container | V1EphemeralContainer,
  images: ImageStore,
  backOff: PullBackOff,
  event: Event,
): Promise<PullOutcome> {
  const image = container.image ?? '';
  const present = await images.resolve(image).catch(() => undefined);
  const policy = container.imagePullPolicy ?? 'IfNotPresent';
  if (policy !== 'Always') {
    if (present) {
      event('Normal', 'Pulled', `Container image "${image}" already present on machine`);
      return { kind: 'image', image: present };
    }
    if (policy === 'Never') {
      const message = `Container image "${image}" is not present with pull policy of Never`;
      event('Warning', 'ErrImageNeverPull', message);
      return { kind: 'error', reason: 'ErrImageNeverPull', message };
    }
  }
  const key = `${pod.metadata?.uid ?? ''}_${image}`;
  if (backOff.isInBackOffSinceUpdate(key, Date.now())) {
    const message = `Back-off pulling image "${image}"`;
    event('Normal', 'BackOff', message);
    return { kind: 'error', reason: 'ImagePullBackOff', message };
  }
  event('Normal', 'Pulling', `Pulling image "${image}"`);
  const start = Date.now();
  const pulled = present ?? (await images.resolve(image).catch(() => undefined));
  if (!pulled) {
    const message = pullError(image);
    event('Warning', 'Failed', `Failed to pull image "${image}": ${message}`);
    backOff.next(key, Date.now());
    return { kind: 'error', reason: 'ErrImagePull', message };
  }
  const took = `${Date.now() - start}ms`;
  event('Normal', 'Pulled', `Successfully pulled image "${image}" in ${took} (${took} including waiting)`);
  backOff.delete(key);
  return { kind: 'image', image: pulled };
}
