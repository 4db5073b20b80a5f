// One mirror copy: bytes for a session, coalesced and bounded, dropped (and the session told) when it falls behind.
import type { IncomingStream } from './subscription.js';

/**
 * A copy is abandoned once this many bytes wait for the session: the copy must never slow the original exchange, and a
 * copy with a hole in it is worthless, so the whole copy of that connection goes (and the session is told).
 */
export const MIRROR_BUFFER_LIMIT = 1024 * 1024;
/**
 * Copies are sent this long after the bytes arrived: by then the app has usually answered, so waking the tunnel (and
 * the CLI behind it) for the copy does not delay the answer on a busy node. Mirror answers are dropped, so nothing
 * waits.
 */
export const MIRROR_COALESCE_MS = 2;

export class MirrorCopy {
  dropped = false;
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    readonly stream: IncomingStream,
    private readonly onDrop: (why: string) => void,
  ) {}

  push(chunk: Buffer): void {
    if (this.dropped) return;
    if (this.stream.destroyed || this.stream.writableLength + this.pendingBytes + chunk.length > MIRROR_BUFFER_LIMIT) {
      this.drop('the tunnel did not keep up');
      return;
    }
    this.pending.push(chunk);
    this.pendingBytes += chunk.length;
    this.timer ??= setTimeout(() => this.flush(), MIRROR_COALESCE_MS);
  }

  /** The client finished sending: send what is left and half-close the copy. */
  end(): void {
    if (this.dropped || this.stream.writableEnded || this.stream.destroyed) return;
    this.flush();
    this.stream.end();
  }

  /** Abandons the copy (the session cannot keep up, or bytes are missing): its stream is reset and the session told. */
  drop(why: string): void {
    if (this.dropped) return;
    this.abandon(`mirror copy dropped: ${why}`);
    this.onDrop(why);
  }

  /** The client reset its connection: so is the copy. */
  reset(reason: string): void {
    if (!this.dropped && !this.stream.destroyed) this.abandon(reason);
  }

  private abandon(reason: string): void {
    this.dropped = true;
    clearTimeout(this.timer);
    this.pending = [];
    this.pendingBytes = 0;
    if (this.stream.reset) this.stream.reset(reason);
    else this.stream.destroy();
  }

  private flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.dropped || this.pending.length === 0) return;
    const data = this.pending.length === 1 ? this.pending[0] : Buffer.concat(this.pending, this.pendingBytes);
    this.pending = [];
    this.pendingBytes = 0;
    this.stream.write(data);
  }
}
