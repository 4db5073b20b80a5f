// Watch responses: newline-delimited JSON events over a chunked response, resumable from a resourceVersion, with 410
// Gone (an ERROR event, as kube-apiserver sends once the response has started) when the version left the history
// window.
import type { ServerResponse } from 'node:http';
import { gone, type K8sObject } from './errors.js';
import type { Objects } from './objects.js';
import { storeKey, type ResourceType } from './resources.js';
import type { Matcher } from './selectors.js';
import type { StoreEvent } from './store.js';

/**
 * How long a watch lasts when the client gives no timeoutSeconds (kube-apiserver: 30–60 min; shorter keeps tests tidy).
 */
const DEFAULT_WATCH_SECONDS = 1800;
/** How often an open watch that allowed bookmarks gets one (kube-apiserver: about every minute). */
const BOOKMARK_INTERVAL_MS = 30_000;

export interface WatchParams {
  t: ResourceType;
  ns?: string;
  match: Matcher;
  resourceVersion?: string;
  timeoutSeconds?: number;
  bookmarks: boolean;
  sendInitialEvents: boolean;
  /** Converts an object to what is sent (e.g. a Table row); identity by default. */
  render?: (o: K8sObject) => K8sObject;
  /** BOOKMARK_INTERVAL_MS unless a test wants the timers to meet sooner. */
  bookmarkIntervalMs?: number;
}

export function serveWatch(
  objects: Objects,
  res: ServerResponse,
  p: WatchParams,
  track: (stop: () => void) => () => void,
): void {
  const key = storeKey(p.t);
  const inScope = (o: K8sObject) => !p.t.namespaced || p.ns === undefined || o.metadata.namespace === p.ns;
  const seen = new Set<string>();
  const id = (o: K8sObject) => `${o.metadata.namespace ?? ''}/${o.metadata.name}`;
  const render = p.render ?? ((o: K8sObject) => o);
  res.writeHead(200, {
    'Content-Type': 'application/json',
    'Cache-Control': 'no-cache, private',
    'Transfer-Encoding': 'chunked',
  });
  res.flushHeaders();
  // Once the response has ended (its timeout, a stop) nothing more may be written: a timer or a store event due in
  // the same turn — all of them at once after the process was paused — would otherwise write after end, an 'error'
  // on the response that nothing handles.
  const send = (type: string, object: K8sObject) => {
    if (res.writableEnded || res.destroyed) return;
    res.write(`${JSON.stringify({ type, object })}\n`);
  };
  let lastRv = objects.store.currentRV();

  const deliver = (ev: StoreEvent, replay = false) => {
    if (ev.key !== key || !inScope(ev.object)) return;
    lastRv = ev.rv;
    const o = objects.present(p.t, structuredClone(ev.object));
    const matches = p.match(o);
    const known = seen.has(id(o));
    if (ev.type === 'DELETED') {
      if (known || matches) send('DELETED', render(o));
      seen.delete(id(o));
    } else if (matches) {
      send(known || (replay && ev.type === 'MODIFIED') ? 'MODIFIED' : 'ADDED', render(o));
      seen.add(id(o));
    } else if (known) {
      // An object that stops matching leaves as a DELETED with its previous content at the event's resourceVersion
      // (apiserver pkg/storage/cacher/cache_watcher.go convertToWatchEvent).
      const before = ev.prev ? objects.present(p.t, structuredClone(ev.prev)) : o;
      send('DELETED', render({ ...before, metadata: { ...before.metadata, resourceVersion: String(ev.rv) } }));
      seen.delete(id(o));
    }
  };

  const rv = p.resourceVersion;
  const bookmark = (annotations?: Record<string, string>) =>
    send('BOOKMARK', {
      kind: p.t.kind,
      apiVersion: p.t.group ? `${p.t.group}/${p.t.version}` : p.t.version,
      metadata: { resourceVersion: String(lastRv), ...(annotations ? { annotations } : {}) },
    });
  if (!rv || rv === '0' || p.sendInitialEvents) {
    for (const o of objects.list(p.t, p.ns)) {
      if (!p.match(o)) continue;
      seen.add(id(o));
      send('ADDED', render(o));
    }
    if (p.sendInitialEvents && p.bookmarks) bookmark({ 'k8s.io/initial-events-end': 'true' });
  } else {
    const since = objects.store.eventsSince(key, Number(rv));
    if (since === 'gone' || Number.isNaN(Number(rv))) {
      send('ERROR', gone(`too old resource version: ${rv} (${objects.store.oldestRV()})`).toStatus());
      res.end();
      return;
    }
    for (const o of objects.list(p.t, p.ns))
      if (p.match(o) && Number(o.metadata.resourceVersion) <= Number(rv)) seen.add(id(o));
    for (const ev of since) deliver(ev, true);
  }
  const unsubscribe = objects.store.subscribe((ev) => deliver(ev));
  const stop = () => {
    unsubscribe();
    for (const t of timers) clearTimeout(t);
    if (!res.writableEnded) res.end();
  };
  // The timeout stops the watch whole (its bookmark timer and subscription too), not just the response.
  const timeoutMs = (p.timeoutSeconds ?? DEFAULT_WATCH_SECONDS) * 1000;
  const timers = [
    setTimeout(stop, timeoutMs),
    ...(p.bookmarks ? [setInterval(() => bookmark(), p.bookmarkIntervalMs ?? BOOKMARK_INTERVAL_MS)] : []),
    // A bookmark 2 s before the timeout, so that the client resumes from the latest version (apiserver
    // pkg/storage/cacher/cache_watcher.go nextBookmarkTime).
    ...(p.bookmarks && timeoutMs > 2000 ? [setTimeout(() => bookmark(), timeoutMs - 2000)] : []),
  ];
  const untrack = track(stop);
  res.on('close', () => {
    stop();
    untrack();
  });
}
