// List-then-watch of one resource with client-node's Watch, as an informer does: a watch that ends is resumed from the
// last resourceVersion, and a 410 Gone (or any failure) starts over with a fresh list.
import { Watch, type KubeConfig, type KubernetesObject } from '@kubernetes/client-node';

export interface ListWatchOptions<T extends KubernetesObject> {
  kubeConfig: KubeConfig;
  /** Watch path, e.g. /api/v1/pods. */
  path: string;
  fieldSelector?: string;
  list(): Promise<{ items: T[]; metadata?: { resourceVersion?: string } }>;
  /** The full set after every (re)list: lets the consumer drop what vanished while it was not watching. */
  onList(items: T[]): void;
  onEvent(type: 'ADDED' | 'MODIFIED' | 'DELETED', obj: T): void;
}

/** Wait before listing again after a failure, so a dead API server is not hammered. */
const RETRY_MS = 200;

export interface ListWatch {
  /** Resolves after the first successful list. */
  synced: Promise<void>;
  stop(): void;
}

export function startListWatch<T extends KubernetesObject>(o: ListWatchOptions<T>): ListWatch {
  let stopped = false;
  let abort: AbortController | undefined;
  let resourceVersion: string | undefined;
  let markSynced: () => void = () => undefined; // replaced by the synced promise's resolve
  const synced = new Promise<void>((resolve) => (markSynced = resolve));
  const watch = new Watch(o.kubeConfig);

  const relist = async (): Promise<void> => {
    while (!stopped) {
      try {
        const list = await o.list();
        if (stopped) return;
        resourceVersion = list.metadata?.resourceVersion;
        o.onList(list.items);
        markSynced();
        return;
      } catch {
        await new Promise((r) => setTimeout(r, RETRY_MS));
      }
    }
  };

  const loop = async (): Promise<void> => {
    await relist();
    while (!stopped) {
      const outcome = await new Promise<'resume' | 'relist'>((resolve) => {
        let gone = false;
        watch
          .watch(
            o.path,
            { fieldSelector: o.fieldSelector, resourceVersion, allowWatchBookmarks: true },
            (phase: string, obj: T & { code?: number }) => {
              if (phase === 'ERROR') {
                gone = true;
                return;
              }
              const rv = obj.metadata?.resourceVersion;
              if (rv) resourceVersion = rv;
              if (phase === 'ADDED' || phase === 'MODIFIED' || phase === 'DELETED') o.onEvent(phase, obj);
            },
            (err: unknown) => resolve(err || gone ? 'relist' : 'resume'),
          )
          .then((controller) => {
            abort = controller;
            if (stopped) controller.abort();
          })
          .catch(() => resolve('relist'));
      });
      if (stopped) return;
      if (outcome === 'relist') {
        await new Promise((r) => setTimeout(r, RETRY_MS));
        await relist();
      }
    }
  };
  void loop();
  return {
    synced,
    stop() {
      stopped = true;
      abort?.abort();
    },
  };
}
