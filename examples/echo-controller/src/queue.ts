// A work queue of object keys: each key at most once in the queue, one reconcile at a time per key, retries with
// backoff.
export interface WorkQueueOptions {
  /** First retry delay; doubles per consecutive failure of the same key. */
  baseDelayMs?: number;
  maxDelayMs?: number;
  /** Called when a reconcile fails (it is retried after the returned delay). */
  onError?: (key: string, err: unknown, retryInMs: number) => void;
}

/** 100 ms then doubling reaches the 30 s ceiling after ~9 failures: quick for conflicts, gentle for a broken API. */
const BASE_DELAY_MS = 100;
const MAX_DELAY_MS = 30_000;

export class WorkQueue {
  private readonly queue: string[] = [];
  private readonly queued = new Set<string>();
  private readonly processing = new Set<string>();
  /** Keys added again while being processed: they go back in the queue when that reconcile ends. */
  private readonly dirty = new Set<string>();
  private readonly failures = new Map<string, number>();
  private readonly timers = new Set<NodeJS.Timeout>();
  private wake: (() => void) | undefined;
  private stopped = false;

  constructor(private readonly options: WorkQueueOptions = {}) {}

  add(key: string): void {
    if (this.stopped) return;
    if (this.processing.has(key)) {
      this.dirty.add(key);
      return;
    }
    if (this.queued.has(key)) return;
    this.queued.add(key);
    this.queue.push(key);
    this.wake?.();
  }

  addAfter(key: string, delayMs: number): void {
    if (this.stopped) return;
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      this.add(key);
    }, delayMs);
    this.timers.add(timer);
  }

  /** Consecutive failures of key so far. */
  retries(key: string): number {
    return this.failures.get(key) ?? 0;
  }

  get length(): number {
    return this.queue.length;
  }

  /** Processes keys with `workers` concurrent reconciles (never two for one key) until stop(). */
  async run(handler: (key: string) => Promise<void>, workers = 1): Promise<void> {
    await Promise.all(Array.from({ length: workers }, () => this.worker(handler)));
  }

  stop(): void {
    this.stopped = true;
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    this.wake?.();
  }

  private async next(): Promise<string | undefined> {
    while (!this.stopped) {
      const key = this.queue.shift();
      if (key !== undefined) {
        this.queued.delete(key);
        return key;
      }
      await new Promise<void>((resolve) => {
        const previous = this.wake;
        this.wake = () => {
          this.wake = undefined;
          previous?.();
          resolve();
        };
      });
    }
    return undefined;
  }

  private async worker(handler: (key: string) => Promise<void>): Promise<void> {
    for (let key = await this.next(); key !== undefined; key = await this.next()) {
      this.processing.add(key);
      try {
        await handler(key);
        this.failures.delete(key);
      } catch (err) {
        const n = (this.failures.get(key) ?? 0) + 1;
        this.failures.set(key, n);
        const delay = Math.min(
          (this.options.baseDelayMs ?? BASE_DELAY_MS) * 2 ** (n - 1),
          this.options.maxDelayMs ?? MAX_DELAY_MS,
        );
        this.options.onError?.(key, err, delay);
        this.addAfter(key, delay);
      } finally {
        this.processing.delete(key);
        if (this.dirty.delete(key)) this.add(key);
      }
    }
  }
}
