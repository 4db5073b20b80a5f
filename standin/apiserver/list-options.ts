// A list's and a watch's options as kube-apiserver reads them: ListOptions validation, and which resourceVersion a
// list is served at (resourceVersion "" or "0", a minimum, or an exact version rebuilt from the watch history).
import { ApiError, gone, invalid, type K8sObject } from './errors.js';
import type { Store } from './store.js';

/** How long a list waits for a resourceVersion the store has not reached (apiserver cacher watch_cache.go). */
export const TOO_LARGE_WAIT_MS = 3000;

/**
 * apimachinery pkg/apis/meta/internalversion/validation ValidateListOptions with the WatchList feature on (as in
 * v1.32), answered as apiserver pkg/endpoints/handlers/get.go does: a 422 on ListOptions.meta.k8s.io.
 */
export function validateListOptions(q: URLSearchParams, watch: boolean): void {
  const match = q.get('resourceVersionMatch') ?? '';
  const rv = q.get('resourceVersion') ?? '';
  const causes: { field: string; message: string; reason: string }[] = [];
  const forbid = (field: string, why: string) =>
    causes.push({ field, reason: 'FieldValueForbidden', message: `Forbidden: ${why}` });
  const unsupported = (supported: string[]) =>
    causes.push({
      field: 'resourceVersionMatch',
      reason: 'FieldValueNotSupported',
      message: `Unsupported value: "${match}": supported values: ${supported.map((v) => `"${v}"`).join(', ')}`,
    });
  if (watch) {
    if (q.has('sendInitialEvents') && match !== 'NotOlderThan')
      forbid('resourceVersionMatch', 'sendInitialEvents requires setting resourceVersionMatch to NotOlderThan');
    if (match) {
      if (!q.has('sendInitialEvents'))
        forbid(
          'resourceVersionMatch',
          'resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided',
        );
      if (match !== 'NotOlderThan') unsupported(['NotOlderThan']);
    }
  } else {
    if (match) {
      if (!rv) forbid('resourceVersionMatch', 'resourceVersionMatch is forbidden unless resourceVersion is provided');
      if (match !== 'Exact' && match !== 'NotOlderThan') unsupported(['Exact', 'NotOlderThan', '']);
      if (match === 'Exact' && rv === '0')
        forbid('resourceVersionMatch', 'resourceVersionMatch "exact" is forbidden for resourceVersion "0"');
    }
    if (q.has('sendInitialEvents')) forbid('sendInitialEvents', 'sendInitialEvents is forbidden for list');
  }
  if (causes.length > 0) throw invalid('ListOptions', 'meta.k8s.io', '', causes);
}

/**
 * The objects a list answers and the resourceVersion it reports, as the cacher and etcd3 store serve it
 * (apiserver pkg/storage/cacher/delegator.go, cacher.go GetList, etcd3/store.go GetList):
 * - resourceVersion "" (a consistent read) or "0" (any version): what is stored now;
 * - N, or N with NotOlderThan: now, once the store has reached N; a store that does not within 3 s is a 504
 *   `Too large resource version` (storage/errors.go NewTooLargeResourceVersionError);
 * - N with Exact: the objects as they were at N, a 410 Expired once N left the history window
 *   (etcd3/errors.go), a 504 for a version not reached yet.
 */
export async function listVersion(
  store: Store,
  key: string,
  ns: string | undefined,
  q: URLSearchParams,
): Promise<{ items: K8sObject[]; resourceVersion: string }> {
  const rv = q.get('resourceVersion') ?? '';
  const now = () => ({ items: store.list(key, ns), resourceVersion: String(store.currentRV()) });
  if (rv === '' || rv === '0') return now();
  const wanted = Number(rv);
  if (!Number.isSafeInteger(wanted)) return now();
  if (q.get('resourceVersionMatch') === 'Exact') {
    if (wanted > store.currentRV()) throw tooLarge(wanted, store.currentRV(), 0);
    const items = store.listAt(key, ns, wanted);
    if (items === 'gone') throw gone('The resourceVersion for the provided list is too old.');
    return { items, resourceVersion: rv };
  }
  if (wanted > store.currentRV()) {
    const reached = await store.reached(wanted, TOO_LARGE_WAIT_MS);
    if (!reached) throw tooLarge(wanted, store.currentRV(), 1);
  }
  return now();
}

function tooLarge(wanted: number, current: number, retrySeconds: number): ApiError {
  return new ApiError(504, 'Timeout', `Timeout: Too large resource version: ${wanted}, current: ${current}`, {
    causes: [{ reason: 'ResourceVersionTooLarge', message: 'Too large resource version' }],
    retryAfterSeconds: retrySeconds,
  });
}
