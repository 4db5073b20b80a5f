// Free buffers by size, shared by the process: its connections' own reads (own-reads.ts) and the messages the
// port-forward tunnel copies its writes into (cli/kube/tunnel.ts). A Buffer of 4 KiB or more comes from malloc (Node
// pools only smaller ones), and a process that moves bulk data through fresh ones makes V8 start major GCs as they add
// up, and the C heap fault its pages in again after each trim; taking one that was given back costs neither.

/**
 * Free buffers by size: take() one that was given back, or a new one. Bounded, and emptied once none was taken for a
 * while, so an idle process holds none. Allocating read buffers was the cost of short connections: 64 connections of
 * 2 MiB each spent a quarter of the CLI's CPU in major GCs (benchmarks.md).
 */
class BufferPool {
  readonly #free = new Map<number, Buffer[]>();
  #bytes = 0;
  #idle: NodeJS.Timeout | undefined;

  take(size: number): Buffer {
    const reused = this.#free.get(size)?.pop();
    if (!reused) return Buffer.allocUnsafe(size);
    this.#bytes -= size;
    this.#idle?.refresh();
    return reused;
  }

  /** Takes back a buffer nothing refers to any more. */
  give(buffer: Buffer): void {
    if (this.#bytes + buffer.length > POOL_BYTES) return;
    const list = this.#free.get(buffer.length);
    if (list) list.push(buffer);
    else this.#free.set(buffer.length, [buffer]);
    this.#bytes += buffer.length;
    if (!this.#idle) {
      this.#idle = setTimeout(() => this.#clear(), POOL_IDLE_MS);
      this.#idle.unref();
    } else this.#idle.refresh();
  }

  #clear(): void {
    this.#free.clear();
    this.#bytes = 0;
    this.#idle = undefined;
  }
}

/** What the pool keeps at most: 64 connections' worth of 1 MiB buffers (the mux's window budget is as large). */
const POOL_BYTES = 64 * 1024 * 1024;
/** The pool is emptied after this long without a buffer taken or given back. */
const POOL_IDLE_MS = 10_000;

/** One pool per process, as Node's own Buffer pool is: every listener, session and tunnel shares it. */
export const pool = new BufferPool();
