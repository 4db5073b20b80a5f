// A session-long view of a set of pods: client-node's informer (list, then watch from the list's resourceVersion; a
// watch that ends restarts from the last one, a 410 Gone re-lists), with its list and each watch's connect bounded by
// --request-timeout like every other call on the API server. A watch that fails is started again after a pause.
import { CoreV1Api, ListWatch, Watch, type KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { startWatch } from './request-timeout.js';
import { WATCH_RESTART_PAUSE_MS, type PodQuery } from './watch.js';

export interface PodInformer {
  /** Stops watching; no callback is called afterwards. */
  stop(): void;
}

/**
 * Calls `onPods` with every pod matching the query after each list and after each batch of changes. `onStopped` is
 * called once if a list fails (the view can no longer be trusted); failed watches are retried.
 */
export function informPods(
  kc: KubeConfig,
  query: PodQuery,
  onPods: (pods: V1Pod[]) => void,
  onStopped: (err: unknown) => void,
): PodInformer {
  const core = kc.makeApiClient(CoreV1Api);
  let stopped = false;
  let failedList: unknown;
  let restart: NodeJS.Timeout | undefined;
  const list = async () => {
    try {
      const pods = await core.listNamespacedPod({
        namespace: query.namespace,
        labelSelector: query.labelSelector,
        fieldSelector: query.fieldSelector,
      });
      // An empty or unchanged list calls no informer callback: the view is reported after every list all the same.
      changed();
      return pods;
    } catch (err) {
      failedList = err;
      throw err;
    }
  };
  const path = `/api/v1/namespaces/${encodeURIComponent(query.namespace)}/pods`;
  const watch = new BoundedWatch(kc, () => stopped);
  const informer = new ListWatch<V1Pod>(path, watch, list, false, query.labelSelector, query.fieldSelector);

  // The informer calls back once per pod while it applies a list: the view is reported once they all are applied.
  let pending: NodeJS.Immediate | undefined;
  function changed(): void {
    pending ??= setImmediate(() => {
      pending = undefined;
      if (!stopped) onPods([...informer.list()]);
    });
  }
  informer.on('change', changed);
  informer.on('error', (err: unknown) => {
    if (stopped) return;
    if (err === failedList) {
      stop();
      onStopped(err);
      return;
    }
    restart = setTimeout(() => void informer.start(), WATCH_RESTART_PAUSE_MS);
  });
  function stop(): void {
    stopped = true;
    clearTimeout(restart);
    if (pending) clearImmediate(pending);
    void informer.stop();
  }
  informer.start().catch((err: unknown) => {
    if (stopped) return;
    stop();
    onStopped(err);
  });
  return { stop };
}

/**
 * The informer's Watch: each connect bounded (startWatch), and none left open when it starts after the informer stopped
 * (client-node's ListWatch does not look again between its list and its watch).
 */
class BoundedWatch extends Watch {
  constructor(
    kc: KubeConfig,
    private readonly stopped: () => boolean,
  ) {
    super(kc);
  }

  override async watch(...[path, params, callback, done]: Parameters<Watch['watch']>): Promise<AbortController> {
    const controller = await startWatch(this.config, path, params, callback, done);
    if (this.stopped()) controller.abort();
    return controller;
  }
}
