// List then watch one resource, forever: restart the watch from the last resourceVersion, re-list when it has expired
// (410).
import { Watch, type KubeConfig } from '@kubernetes/client-node';

export type EventType = 'ADDED' | 'MODIFIED' | 'DELETED';

export interface KubeObjectLike {
  metadata?: { name?: string; namespace?: string; resourceVersion?: string };
}

export interface ListResult<T> {
  items: T[];
  metadata?: { resourceVersion?: string };
}

export interface ListWatchOptions<T extends KubeObjectLike> {
  kubeConfig: KubeConfig;
  /** The collection's API path, e.g. /apis/example.com/v1/echoes or /apis/apps/v1/namespaces/default/deployments. */
  path: string;
  labelSelector?: string;
  list: () => Promise<ListResult<T>>;
  onEvent: (type: EventType, obj: T) => void;
  onError?: (err: unknown) => void;
  /** Delay before retrying after a failed list or watch; doubles up to maxRetryMs. */
  retryMs?: number;
  maxRetryMs?: number;
}

/** The server ends each watch after this long; a fresh one resumes from the last resourceVersion without a list. */
const WATCH_TIMEOUT_SECONDS = 290;

class Expired extends Error {}

function isExpired(err: unknown): boolean {
  const e = err as { statusCode?: number; code?: number } | undefined;
  return err instanceof Expired || e?.statusCode === 410 || e?.code === 410;
}

export class ListWatch<T extends KubeObjectLike> {
  /** Last known state by namespace/name: a re-list turns vanished objects into DELETED events. */
  private readonly known = new Map<string, T>();
  private resourceVersion: string | undefined;
  private abort: AbortController | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private stopped = false;
  private failures = 0;
  /** How many lists were made: 1 + one per expired watch (tests read it). */
  lists = 0;

  constructor(private readonly options: ListWatchOptions<T>) {}

  start(): void {
    void this.relist();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    this.abort?.abort();
  }

  private key(obj: T): string {
    return `${obj.metadata?.namespace ?? ''}/${obj.metadata?.name ?? ''}`;
  }

  /** After a failure: wait longer each time in a row (reset by the next event), so a broken server is not hammered. */
  private retry(next: () => void, err: unknown): void {
    if (this.stopped) return;
    this.options.onError?.(err);
    this.failures += 1;
    const delay = Math.min((this.options.retryMs ?? 200) * 2 ** (this.failures - 1), this.options.maxRetryMs ?? 10_000);
    this.retryTimer = setTimeout(next, delay);
  }

  /** After a quiet end (the server's timeout on a resource nobody touched): a short fixed pause, not a failure. */
  private pause(next: () => void): void {
    if (this.stopped) return;
    this.retryTimer = setTimeout(next, this.options.retryMs ?? 200);
  }

  private async relist(): Promise<void> {
    if (this.stopped) return;
    let result: ListResult<T>;
    try {
      this.lists += 1;
      result = await this.options.list();
    } catch (err) {
      this.retry(() => void this.relist(), err);
      return;
    }
    if (this.stopped) return;
    const seen = new Set<string>();
    for (const obj of result.items) {
      const k = this.key(obj);
      seen.add(k);
      const before = this.known.get(k);
      this.known.set(k, obj);
      if (!before) this.options.onEvent('ADDED', obj);
      else if (before.metadata?.resourceVersion !== obj.metadata?.resourceVersion)
        this.options.onEvent('MODIFIED', obj);
    }
    for (const [k, obj] of [...this.known]) {
      if (!seen.has(k)) {
        this.known.delete(k);
        this.options.onEvent('DELETED', obj);
      }
    }
    this.resourceVersion = result.metadata?.resourceVersion;
    this.watch();
  }

  private watch(): void {
    if (this.stopped) return;
    let expired = false;
    let failure: Error | undefined;
    let sawEvent = false;
    const query = {
      resourceVersion: this.resourceVersion,
      allowWatchBookmarks: true,
      timeoutSeconds: WATCH_TIMEOUT_SECONDS,
      labelSelector: this.options.labelSelector,
    };
    const onEvent = (type: string, obj: T & { code?: number }): void => {
      if (type === 'ERROR') {
        // The server says the resourceVersion is too old (410 Gone): only a new list can catch up.
        if (obj.code === 410) expired = true;
        else
          failure = new Error(`watch ${this.options.path}: ${(obj as { message?: string }).message ?? 'error event'}`);
        this.abort?.abort();
        return;
      }
      sawEvent = true;
      this.failures = 0;
      if (obj.metadata?.resourceVersion) this.resourceVersion = obj.metadata.resourceVersion;
      if (type === 'BOOKMARK') return;
      const k = this.key(obj);
      if (type === 'DELETED') this.known.delete(k);
      else this.known.set(k, obj);
      if (type === 'ADDED' || type === 'MODIFIED' || type === 'DELETED') this.options.onEvent(type, obj);
    };
    const onDone = (err: unknown): void => {
      if (this.stopped) return;
      if (expired || isExpired(err)) {
        void this.relist();
      } else if (failure) {
        this.retry(() => this.watch(), failure);
      } else if (err && !(err instanceof Error && err.name === 'AbortError')) {
        this.retry(() => this.watch(), err);
      } else if (!sawEvent) {
        // A watch that ends with nothing to say gets a short pause, so a server that closes at once is not hammered.
        this.pause(() => this.watch());
      } else {
        this.watch();
      }
    };
    new Watch(this.options.kubeConfig)
      .watch(this.options.path, query, onEvent, onDone)
      .then((abort) => {
        this.abort = abort;
        if (this.stopped) abort.abort();
      })
      .catch((err: unknown) => this.retry(() => this.watch(), err));
  }
}
