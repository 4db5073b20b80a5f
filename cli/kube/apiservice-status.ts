// Follows an APIService's Available condition while a session takes its pods over: the aggregator re-checks discovery
// against the local command, so a local server that breaks discovery turns the APIService unavailable — the header
// then says so.
import { ApiregistrationV1Api, type KubeConfig } from '@kubernetes/client-node';
import { availableOf } from './targets/apiservice.js';
import type { ExtensionBackend } from './targets/resolver.js';

type Available = ExtensionBackend['available'];

/**
 * How often the condition is read. The aggregator re-checks every few seconds after a change and every 30 s otherwise;
 * a read of one object this often costs the API server nothing worth counting.
 */
export const AVAILABLE_POLL_MS = 3000;

function same(a: Available, b: Available): boolean {
  return a.status === b.status && a.reason === b.reason && a.message === b.message;
}

/** Calls `onChange` with each new Available condition; read errors are skipped (the next read may succeed). */
export function followAvailable(
  kc: KubeConfig,
  name: string,
  current: Available,
  onChange: (available: Available) => void,
  intervalMs = AVAILABLE_POLL_MS,
): () => void {
  const api = kc.makeApiClient(ApiregistrationV1Api);
  let last = current;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  const read = async (): Promise<void> => {
    try {
      const now = availableOf(await api.readAPIService({ name }));
      if (!stopped && !same(now, last)) {
        last = now;
        onChange(now);
      }
    } catch {
      // The API server may be briefly unreachable (the session's own reconnects say so): keep the last condition.
    }
    if (!stopped) timer = setTimeout(() => void read(), intervalMs).unref();
  };
  timer = setTimeout(() => void read(), intervalMs).unref();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
