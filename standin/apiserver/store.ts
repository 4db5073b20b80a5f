// In-memory object storage with one resourceVersion counter, change events and a bounded watch history window.
import type { K8sObject } from './errors.js';

export type EventType = 'ADDED' | 'MODIFIED' | 'DELETED';

export interface StoreEvent {
  type: EventType;
  /** storeKey of the resource type: `<group>/<resource>`. */
  key: string;
  object: K8sObject;
  /** The object before a MODIFIED or DELETED event, so that a list can be rebuilt as it was at an older version. */
  prev?: K8sObject;
  rv: number;
}

/** How many past events a watch may resume from; older resourceVersions get 410 Gone, as etcd compaction does. */
export const HISTORY_WINDOW = 5000;

export class Store {
  private rv = 1;
  private readonly data = new Map<string, Map<string, K8sObject>>();
  private readonly byUid = new Map<string, { key: string; ns: string; name: string }>();
  private readonly history: StoreEvent[] = [];
  private readonly listeners = new Set<(ev: StoreEvent) => void>();
  private compactedRv = 1;

  currentRV(): number {
    return this.rv;
  }

  /** Lowest resourceVersion from which a watch can still resume. */
  oldestRV(): number {
    return this.compactedRv;
  }

  private bucket(key: string): Map<string, K8sObject> {
    let b = this.data.get(key);
    if (!b) {
      b = new Map();
      this.data.set(key, b);
    }
    return b;
  }

  get(key: string, ns: string, name: string): K8sObject | undefined {
    const o = this.data.get(key)?.get(`${ns}/${name}`);
    return o ? structuredClone(o) : undefined;
  }

  getByUid(uid: string): { key: string; object: K8sObject } | undefined {
    const loc = this.byUid.get(uid);
    if (!loc) return undefined;
    const object = this.get(loc.key, loc.ns, loc.name);
    return object ? { key: loc.key, object } : undefined;
  }

  list(key: string, ns?: string): K8sObject[] {
    const out: K8sObject[] = [];
    for (const o of this.data.get(key)?.values() ?? []) {
      if (ns === undefined || (o.metadata.namespace ?? '') === ns) out.push(structuredClone(o));
    }
    return out.sort(
      (a, b) =>
        (a.metadata.namespace ?? '').localeCompare(b.metadata.namespace ?? '') ||
        a.metadata.name.localeCompare(b.metadata.name),
    );
  }

  keys(): string[] {
    return [...this.data.keys()];
  }

  /** Stores an object (new or replacing), stamping the next resourceVersion; returns the stored copy. */
  put(key: string, obj: K8sObject): K8sObject {
    const ns = obj.metadata.namespace ?? '';
    const bucket = this.bucket(key);
    const prev = bucket.get(`${ns}/${obj.metadata.name}`);
    const stored = structuredClone(obj);
    stored.metadata.resourceVersion = String(++this.rv);
    bucket.set(`${ns}/${stored.metadata.name}`, stored);
    if (stored.metadata.uid) this.byUid.set(stored.metadata.uid, { key, ns, name: stored.metadata.name });
    this.emit({ type: prev ? 'MODIFIED' : 'ADDED', key, object: stored, prev, rv: this.rv });
    return structuredClone(stored);
  }

  remove(key: string, ns: string, name: string): K8sObject | undefined {
    const bucket = this.data.get(key);
    const old = bucket?.get(`${ns}/${name}`);
    if (!bucket || !old) return undefined;
    bucket.delete(`${ns}/${name}`);
    if (old.metadata.uid) this.byUid.delete(old.metadata.uid);
    const gone = structuredClone(old);
    gone.metadata.resourceVersion = String(++this.rv);
    this.emit({ type: 'DELETED', key, object: gone, prev: old, rv: this.rv });
    return structuredClone(gone);
  }

  /** Events of one resource type after `rv`, or 'gone' when they fell out of the history window. */
  eventsSince(key: string, rv: number): StoreEvent[] | 'gone' {
    if (rv < this.compactedRv) return 'gone';
    return this.history.filter((e) => e.rv > rv && e.key === key);
  }

  /**
   * The objects of one resource type as they were at `rv` (etcd's read at a revision), or 'gone' when that version
   * left the history window: today's objects with every later event undone, newest first.
   */
  listAt(key: string, ns: string | undefined, rv: number): K8sObject[] | 'gone' {
    const since = this.eventsSince(key, rv);
    if (since === 'gone') return 'gone';
    const at = new Map(this.list(key, ns).map((o) => [`${o.metadata.namespace ?? ''}/${o.metadata.name}`, o]));
    for (const ev of since.reverse()) {
      const o = ev.object;
      if (ns !== undefined && (o.metadata.namespace ?? '') !== ns) continue;
      const id = `${o.metadata.namespace ?? ''}/${o.metadata.name}`;
      if (ev.type === 'ADDED') at.delete(id);
      else if (ev.prev) at.set(id, structuredClone(ev.prev));
    }
    return [...at.values()].sort(
      (a, b) =>
        (a.metadata.namespace ?? '').localeCompare(b.metadata.namespace ?? '') ||
        a.metadata.name.localeCompare(b.metadata.name),
    );
  }

  /** Resolves true once the store's resourceVersion is at least `rv`, false when `ms` pass first. */
  reached(rv: number, ms: number): Promise<boolean> {
    if (this.rv >= rv) return Promise.resolve(true);
    return new Promise((resolve) => {
      const done = (ok: boolean) => {
        clearTimeout(timer);
        this.listeners.delete(check);
        resolve(ok);
      };
      const check = () => {
        if (this.rv >= rv) done(true);
      };
      const timer = setTimeout(() => done(false), ms);
      this.listeners.add(check);
    });
  }

  subscribe(fn: (ev: StoreEvent) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /** Test hook: forget history up to now, so every older resourceVersion is Gone. */
  compact(): void {
    this.history.length = 0;
    this.compactedRv = this.rv;
  }

  private emit(ev: StoreEvent): void {
    this.history.push(ev);
    if (this.history.length > HISTORY_WINDOW) {
      const dropped = this.history.splice(0, this.history.length - HISTORY_WINDOW);
      this.compactedRv = dropped[dropped.length - 1].rv;
    }
    for (const l of [...this.listeners]) {
      try {
        l(ev);
      } catch {
        // A listener's failure must not break storage; listeners log their own errors.
      }
    }
  }
}
