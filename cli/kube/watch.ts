// Waits, with a deadline, for a condition on a set of pods by watching them (list, then watch from its resourceVersion;
// a watch that ends is restarted from the last resourceVersion, a 410 Gone re-lists) — no polling. A session-long view
// of pods is pod-informer.ts.
import { CoreV1Api, type KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { apiCall } from './errors.js';
import { ApiTimeoutError, startWatch } from './request-timeout.js';

/** Pause before re-watching after a watch failed (not after a normal server-side end). */
export const WATCH_RESTART_PAUSE_MS = 200;

export interface PodQuery {
  namespace: string;
  labelSelector?: string;
  fieldSelector?: string;
}

export interface WaitOptions {
  timeoutMs: number;
  /** Builds the error thrown when the time is up (it may look at the last pods seen). */
  onTimeout: (pods: V1Pod[]) => Promise<Error> | Error;
  signal?: AbortSignal;
}

/**
 * Calls `decide` with every pod matching the query after the initial list and after each change; resolves with the
 * first value it returns (not undefined) and rejects with what it throws.
 */
export async function waitForPods<T>(
  kc: KubeConfig,
  query: PodQuery,
  decide: (pods: V1Pod[]) => T | undefined,
  options: WaitOptions,
): Promise<T> {
  const core = kc.makeApiClient(CoreV1Api);
  const pods = new Map<string, V1Pod>();
  let settled = false;
  let abort: AbortController | undefined;
  let timer: NodeJS.Timeout | undefined;

  return new Promise<T>((resolve, reject) => {
    const finish = (fn: () => void): void => {
      if (settled) return;
      settled = true;
      if (timer) clearTimeout(timer);
      options.signal?.removeEventListener('abort', onAbort);
      abort?.abort();
      fn();
    };
    const evaluate = (): void => {
      if (settled) return;
      try {
        const result = decide([...pods.values()]);
        if (result !== undefined) finish(() => resolve(result));
      } catch (err) {
        finish(() => reject(err));
      }
    };
    const onAbort = (): void => finish(() => reject(options.signal?.reason ?? new Error('aborted')));
    options.signal?.addEventListener('abort', onAbort, { once: true });
    timer = setTimeout(() => {
      void Promise.resolve(options.onTimeout([...pods.values()])).then(
        (err) => finish(() => reject(err)),
        (err) => finish(() => reject(err)),
      );
    }, options.timeoutMs);

    const list = async (): Promise<void> => {
      const result = await apiCall(
        { action: 'list pods', verb: 'list', resource: 'pods', namespace: query.namespace },
        () =>
          core.listNamespacedPod({
            namespace: query.namespace,
            labelSelector: query.labelSelector,
            fieldSelector: query.fieldSelector,
          }),
      );
      pods.clear();
      for (const pod of result.items) pods.set(pod.metadata?.name ?? '', pod);
      evaluate();
      if (!settled) await watch(result.metadata?.resourceVersion ?? '');
    };
    const watch = async (resourceVersion: string): Promise<void> => {
      let lastVersion = resourceVersion;
      const params: Record<string, string | boolean> = { allowWatchBookmarks: true, resourceVersion };
      if (query.labelSelector) params.labelSelector = query.labelSelector;
      if (query.fieldSelector) params.fieldSelector = query.fieldSelector;
      let gone = false;
      abort = await startWatch(
        kc,
        `/api/v1/namespaces/${encodeURIComponent(query.namespace)}/pods`,
        params,
        (phase, obj: V1Pod & { code?: number }) => {
          if (phase === 'ERROR') {
            gone = obj.code === 410;
            return;
          }
          const rv = obj.metadata?.resourceVersion;
          if (rv) lastVersion = rv;
          if (phase === 'BOOKMARK') return;
          const name = obj.metadata?.name ?? '';
          if (phase === 'DELETED') pods.delete(name);
          else pods.set(name, obj);
          evaluate();
        },
        (err: unknown) => {
          if (settled) return;
          // A wait with a deadline fails at once when the API server does not even answer a watch: retrying would only
          // make its own timeout report the wrong cause later.
          if (err instanceof ApiTimeoutError) {
            finish(() => reject(err));
            return;
          }
          const code =
            (err as { code?: unknown; statusCode?: unknown } | null)?.statusCode ??
            (err as { code?: unknown } | null)?.code;
          // A watch that ended with an error is restarted after a short pause, so a flapping API server is not
          // hammered.
          const pause = err ? WATCH_RESTART_PAUSE_MS : 0;
          setTimeout(() => {
            if (settled) return;
            const restart = gone || code === 410 ? list() : watch(lastVersion);
            restart.catch((e: unknown) => finish(() => reject(e)));
          }, pause);
        },
      );
      if (settled) abort.abort();
    };
    list().catch((err: unknown) => finish(() => reject(err)));
  });
}
