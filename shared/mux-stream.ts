// One multiplexed stream as a Node Duplex: sends DATA within the peer's credit, grants credit as its reader consumes,
// half-closes with END, aborts with RESET. The connection-level work (framing, ids, close) is in mux.ts.
import { Duplex } from 'node:stream';
import { FrameKind, MAX_DATA_FRAME, ProtocolError, encodeReason } from './codec.js';
import type { StreamAccept, StreamOpen } from './protocol.js';

/** The peer reset the stream (e.g. "ECONNREFUSED" for an outgoing connect); `.reason` is the peer's text. */
export class StreamResetError extends Error {
  readonly reason: string;
  constructor(reason: string) {
    super(`stream reset by peer: ${reason}`);
    this.name = 'StreamResetError';
    this.reason = reason;
  }
}

/** The connection under the stream ended (peer went away, tunnel cut, protocol error or local close). */
export class MuxClosedError extends Error {
  readonly reason: string;
  constructor(message: string, reason = message) {
    super(message);
    this.name = 'MuxClosedError';
    this.reason = reason;
  }
}

/** What a stream needs from its connection (implemented by Mux). */
export interface StreamSink {
  sendFrame(kind: FrameKind, id: number, payload?: Buffer): void;
  /** Runs `fn`; the frames it sends leave together, in one write, when it returns. */
  together<T>(fn: () => T): T;
  readonly blocked: boolean;
  /** True while frames sent so far may still reference their payloads (queued, or a write of them in flight). */
  readonly holdsPayloads: boolean;
  /** Calls `fn`, never synchronously, once every frame sent so far has been written (its payloads are free again). */
  whenWritten(fn: () => void): void;
  readonly isClosed: boolean;
  whenDrained(fn: () => void): void;
  forget(id: number): void;
  /** Largest receive window a stream may grow to. */
  readonly maxWindow: number;
  /** Takes up to `bytes` of window growth from the connection's budget; returns what it got. */
  reserveWindow(bytes: number): number;
  /** A credit round trip measured by a stream: how long a sender waiting for credit took to send again (ms). */
  noteRoundTrip(ms: number): void;
  /** The connection's shortest credit round trip (ms), Infinity before the first. */
  readonly roundTripMs: number;
}

/** Where a spliced stream writes what it receives (a net.Socket): see deliverTo(). */
export interface DeliveryTarget {
  write(chunk: Buffer): boolean;
  end(): unknown;
  readonly writableLength: number;
  on(event: 'drain', listener: () => void): unknown;
}

/**
 * Give back credit once a quarter of the window was consumed: few CREDIT frames, and the sender never stalls at the
 * edge.
 */
const CREDIT_UPDATE_DIVISOR = 4;
/**
 * The window grows when the reader consumes at least half the window the sender could use per round trip: the sender
 * then spends part of every round trip waiting for credit, so the window, not the reader, sets the pace (HTTP/2 and
 * QUIC stacks auto-tune on the same signal). Two leave headroom for a path whose RTT varies.
 */
const GROWTH_ROUND_TRIPS = 2;
/**
 * A window that limits grows fourfold per round trip (a TCP slow start doubles): 256 KiB reaches 16 MiB in 3 round
 * trips rather than 6 (9 were measured), which over 20 ms was most of a 64 MiB transfer (bench:tunnel).
 */
const GROWTH_FACTOR = 4;
/**
 * The BDP estimate (see #maybeGrow) may take a window this many times larger in one step at most (256 KiB → 16 MiB):
 * an estimate from a burst that arrived squeezed together cannot claim the whole budget at once.
 */
const MAX_GROWTH_STEP = 64;

/**
 * A byte stream inside a Mux. `open` is the header it was opened with; end() half-closes; reset(reason) aborts both
 * directions (the peer sees a StreamResetError). Emits 'accepted' (StreamAccept) when the peer called accept().
 */
export class MuxStream extends Duplex {
  readonly id: number;
  readonly open: StreamOpen;
  readonly #sink: StreamSink;
  /** Receive window: grows (never shrinks) while the reader outpaces the path, within the connection's budget. */
  #window: number;
  /** When the current measuring epoch began (ms) and how much the reader had consumed then: see #maybeGrow(). */
  #epochAt = performance.now();
  #epochConsumed = 0;
  /** What had arrived when the epoch began: see #maybeGrow(). */
  #epochReceived = 0;
  /**
   * The window the sender could use during the epoch: the one before the last growth, whose extra credit shows in
   * what arrives only a round trip later.
   */
  #epochWindow: number;
  /** The epoch's first CREDIT (when, and consumed then; at -1 none yet) and its latest: see #maybeGrow(). */
  #burstAt = -1;
  #burstConsumed = 0;
  #lastGrantAt = 0;
  #lastGrantConsumed = 0;
  /** A credit round trip being timed: the limit before a grant and when it left (ms), or -1: see receiveData(). */
  #probeLimit = -1;
  #probeAt = 0;
  #sendCredit: number;
  #recvTotal = 0;
  #sentTotal = 0;
  #recvGranted: number;
  #pending: Buffer | null = null;
  #pendingCb: ((err?: Error | null) => void) | null = null;
  #localEnded = false;
  #remoteEnded = false;
  #reset = false;
  #accepted: StreamAccept | null = null;
  #grantScheduled = false;
  #target: DeliveryTarget | null = null;
  /** A chunk handed to _write is not yet acknowledged (the Writable side holds any later ones until it is). */
  #writing = false;
  #pumping = false;
  #destroyed = false;

  constructor(sink: StreamSink, id: number, open: StreamOpen, window: number, initialCredit: number) {
    super({
      allowHalfOpen: true,
      readableHighWaterMark: window,
      writableHighWaterMark: Math.min(window, MAX_DATA_FRAME),
    });
    this.#sink = sink;
    this.id = id;
    this.open = open;
    this.#window = window;
    this.#epochWindow = window;
    this.#sendCredit = initialCredit;
    this.#recvGranted = initialCredit;
    // A peer's reset or a lost connection must never crash the process through an unhandled 'error' event (a bad or
    // hostile peer could otherwise kill the agent); listeners added by the user still receive every error.
    this.on('error', ignoreError);
  }

  /** Details the peer sent with accept(), or null while not (yet) accepted. */
  get acceptedInfo(): StreamAccept | null {
    return this.#accepted;
  }

  /** This side's receive window: the most the peer may send beyond what the reader consumed. */
  get receiveWindow(): number {
    return this.#window;
  }

  /** Bytes this side may still send before the peer grants more credit. */
  get sendCredit(): number {
    return this.#sendCredit;
  }

  /** Stream bytes received from the peer so far. */
  get bytesReceived(): number {
    return this.#recvTotal;
  }

  /** Stream bytes sent to the peer so far (in DATA frames, not those still waiting for credit). */
  get bytesSent(): number {
    return this.#sentTotal;
  }

  /** Tells the opener its request succeeded (e.g. the outgoing connect is up), with optional details. */
  accept(info: StreamAccept = {}): void {
    if (this.destroyed || this.#reset) return;
    this.#sink.sendFrame(FrameKind.ACCEPT, this.id, Buffer.from(JSON.stringify(info), 'utf8'));
  }

  /** Aborts the stream in both directions; the peer's side errors with StreamResetError(reason). */
  reset(reason = 'reset'): void {
    if (this.#reset || this.destroyed) return;
    this.#reset = true;
    this.#sink.sendFrame(FrameKind.RESET, this.id, encodeReason(reason));
    this.destroy();
  }

  // ---- Duplex ----

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (err?: Error | null) => void): void {
    this.#writing = true;
    this.#pending = chunk;
    this.#pendingCb = callback;
    this.#pump();
  }

  override _final(callback: (err?: Error | null) => void): void {
    if (!this.#reset && !this.#sink.isClosed) this.#sink.sendFrame(FrameKind.END, this.id);
    this.#localEnded = true;
    this.#maybeForget();
    callback();
  }

  override _read(): void {
    this.#scheduleGrant();
  }

  // Readable calls _read before it takes bytes out of its buffer, and only once until the next push; a reader taking
  // small bites would then never trigger a grant. So every read() schedules one, computed after the read has happened.
  override read(size?: number): ReturnType<Duplex['read']> {
    const chunk: unknown = super.read(size);
    if (chunk !== null) this.#scheduleGrant();
    return chunk;
  }

  #scheduleGrant(): void {
    if (this.#grantScheduled) return;
    this.#grantScheduled = true;
    queueMicrotask(this.#deferredGrant);
  }

  readonly #deferredGrant = (): void => {
    this.#grantScheduled = false;
    this.grantCredit();
  };

  override _destroy(err: Error | null, callback: (err?: Error | null) => void): void {
    if (!this.#reset && !(this.#localEnded && this.#remoteEnded) && !this.#sink.isClosed) {
      this.#reset = true;
      this.#sink.sendFrame(FrameKind.RESET, this.id, encodeReason(err ? err.message : 'cancelled'));
    }
    this.#destroyed = true;
    this.#pending = null;
    this.#pendingCb = null;
    this.#sink.forget(this.id);
    callback(err);
  }

  // ---- the splice fast path (shared/splice.ts) ----

  /**
   * Sends `chunk` as DATA frames now, without the Writable side, when nothing is queued before it, the peer's credit
   * covers it and the connection is not backed up. Returns false otherwise: the caller then uses write(), which keeps
   * the order (every later sendNow() is refused until the Writable side is empty again). Only before end().
   */
  sendNow(chunk: Buffer): boolean {
    // Private flags rather than the Writable's getters: this runs for every chunk of every spliced connection.
    if (chunk.length > this.#sendCredit || this.#writing || this.#localEnded || this.#destroyed || this.#reset)
      return false;
    if (this.#sink.isClosed || this.#sink.blocked) return false;
    this.#sendCredit -= chunk.length;
    this.#sentTotal += chunk.length;
    if (chunk.length <= MAX_DATA_FRAME) this.#sink.sendFrame(FrameKind.DATA, this.id, chunk);
    // A large chunk (a socket's own read of up to 1 MiB) leaves as one write of many frames, one wake-up of the peer.
    else this.#sink.together(() => this.#sendFrames(chunk));
    return true;
  }

  #sendFrames(chunk: Buffer): void {
    for (let off = 0; off < chunk.length; off += MAX_DATA_FRAME) {
      this.#sink.sendFrame(FrameKind.DATA, this.id, chunk.subarray(off, Math.min(chunk.length, off + MAX_DATA_FRAME)));
    }
  }

  /**
   * True while a chunk given to sendNow() may still be referenced by the connection (queued behind other frames, or
   * its write still in flight): a caller that reuses its buffers waits for whenWritten() (shared/own-reads.ts).
   */
  get holdsPayloads(): boolean {
    return this.#sink.holdsPayloads;
  }

  /** Calls `fn` once the connection has written every frame sent so far: chunks given to sendNow() are free then. */
  whenWritten(fn: () => void): void {
    this.#sink.whenWritten(fn);
  }

  /**
   * From now on, bytes from the peer are written straight to `target` as they are decoded, and its end follows the
   * peer's END; the Readable side gets no more data (it only ends). Credit counts what `target` still buffers, so a
   * slow target holds the peer back exactly as a slow reader does.
   */
  deliverTo(target: DeliveryTarget): void {
    for (let chunk = this.read() as Buffer | null; chunk !== null; chunk = this.read() as Buffer | null)
      target.write(chunk);
    this.#target = target;
    target.on('drain', this.#deferredGrant);
    this.resume(); // so that the Readable side emits 'end' (and the stream can close) after the peer's END
    if (this.#remoteEnded) target.end();
  }

  // ---- from the Mux ----

  /** @internal */ receiveData(data: Buffer): void {
    if (this.#reset || this.#remoteEnded) return;
    this.#recvTotal += data.length;
    if (this.#probeLimit >= 0 && this.#recvTotal > this.#probeLimit) {
      // Bytes beyond the limit that held before a grant can only have been sent after that grant reached the sender:
      // one credit round trip, or more if the sender had nothing to send (the connection keeps the shortest).
      this.#sink.noteRoundTrip(performance.now() - this.#probeAt);
      this.#probeLimit = -1;
    }
    if (this.#recvTotal > this.#recvGranted) {
      throw new ProtocolError(
        `flow control violated on stream ${this.id}: ${this.#recvTotal - this.#recvGranted} bytes beyond credit`,
      );
    }
    if (this.destroyed) return;
    if (this.#target !== null) this.#target.write(data);
    else this.push(data);
    this.grantCredit();
  }

  /** @internal */ receiveCredit(increment: number): void {
    this.#sendCredit += increment;
    if (this.#pending) this.#pump();
  }

  /** @internal */ receiveEnd(): void {
    if (this.#remoteEnded) return;
    this.#remoteEnded = true;
    if (!this.destroyed) {
      this.#target?.end();
      this.push(null);
    }
    this.#maybeForget();
  }

  /** @internal */ receiveReset(reason: string): void {
    if (this.#reset) return;
    this.#reset = true;
    this.#sink.forget(this.id);
    this.destroy(new StreamResetError(reason));
  }

  /** @internal */ receiveAccept(info: StreamAccept): void {
    if (this.#accepted || this.destroyed) return;
    this.#accepted = info;
    this.emit('accepted', info);
  }

  /**
   * Gives the peer credit so that at most one window is unread on this side: consumed bytes (received minus what still
   * sits in the readable buffer, or in the delivery target's) plus the window, minus what was already granted.
   * @internal
   */
  grantCredit(): void {
    if (this.#remoteEnded || this.#reset || this.#destroyed || this.#sink.isClosed) return;
    // Cheap early exit for the common case: even if everything received were consumed, no update would be due yet.
    if (this.#recvTotal + this.#window - this.#recvGranted < this.#window / CREDIT_UPDATE_DIVISOR) return;
    const consumed = this.#recvTotal - this.readableLength - (this.#target?.writableLength ?? 0);
    if (consumed + this.#window - this.#recvGranted < this.#window / CREDIT_UPDATE_DIVISOR) return;
    const now = performance.now();
    this.#maybeGrow(consumed, now);
    if (this.#burstAt < 0) {
      this.#burstAt = now;
      this.#burstConsumed = consumed;
    }
    this.#lastGrantAt = now;
    this.#lastGrantConsumed = consumed;
    const due = consumed + this.#window - this.#recvGranted;
    if (this.#probeLimit < 0) {
      this.#probeLimit = this.#recvGranted;
      this.#probeAt = now;
    }
    const payload = Buffer.allocUnsafe(4);
    payload.writeUInt32BE(due, 0);
    this.#recvGranted += due;
    this.#sink.sendFrame(FrameKind.CREDIT, this.id, payload);
  }

  /**
   * Grows the window (up to the connection's maxWindow, within its budget) when, over an epoch of at least one credit
   * round trip, the reader consumed at least half the window the sender could use (#epochWindow) per round trip: then
   * the path's delay, not the reader, limits the stream (a stream held by its window moves one window per round trip).
   * An epoch ends early, already decided, once the path delivered and the reader consumed half that window within it:
   * a window the sender spends in one burst grows as that burst is read, not a round trip later. Bytes received before
   * the epoch do not count, so a reader emptying a backlog after a pause is not taken for a fast one.
   * It grows GROWTH_FACTOR-fold, or to twice the path's bandwidth-delay product if that is larger: when the window
   * limits, the sender sends what it may in one burst, and the time the reader took to consume it (from the epoch's
   * first CREDIT to its last) is set by the path and the reader, not by the window, so bytes ÷ that time × round trip
   * estimates the BDP (the dispersion of a packet train). A reader that is slow or stalled never consumes that fast,
   * so its window, and what the peer may make this side hold, stays as it is. Before the first round trip is
   * measured, nothing grows.
   */
  #maybeGrow(consumed: number, now: number): void {
    const roundTrip = this.#sink.roundTripMs;
    if (roundTrip === Infinity) return;
    const elapsed = now - this.#epochAt;
    const half = this.#epochWindow / GROWTH_ROUND_TRIPS;
    let fast: boolean;
    // The CREDIT being decided opens the next burst, so the estimate ends at the one before, unless it ends the burst.
    let [endAt, endConsumed] = [this.#lastGrantAt, this.#lastGrantConsumed];
    if (elapsed < roundTrip) {
      if (consumed - this.#epochConsumed < half || this.#recvTotal - this.#epochReceived < half) return;
      fast = true;
      [endAt, endConsumed] = [now, consumed];
    } else {
      fast = (consumed - this.#epochConsumed) * GROWTH_ROUND_TRIPS * roundTrip >= this.#epochWindow * elapsed;
    }
    const span = endAt - this.#burstAt;
    const burst = this.#burstAt < 0 ? 0 : endConsumed - this.#burstConsumed;
    const bdp = burst <= 0 ? 0 : span > 0 ? (burst * roundTrip) / span : Infinity;
    this.#epochAt = now;
    this.#epochConsumed = consumed;
    this.#epochReceived = this.#recvTotal;
    this.#epochWindow = this.#window;
    this.#burstAt = -1;
    if (!fast || this.#window >= this.#sink.maxWindow) return;
    // Whole bytes: the window is sent as CREDIT, a 32-bit integer.
    const target = Math.max(
      this.#window * GROWTH_FACTOR,
      Math.floor(Math.min(2 * bdp, this.#window * MAX_GROWTH_STEP)),
    );
    this.#window += this.#sink.reserveWindow(Math.min(target, this.#sink.maxWindow) - this.#window);
  }

  #pump(): void {
    let chunk = this.#pending;
    if (!chunk || this.#pumping) return;
    if (this.#reset || this.#sink.isClosed) return;
    // A frame may be written at once, and over an in-memory connection the peer's CREDIT can then arrive before
    // sendFrame returns: that receiveCredit must not pump the same bytes again (this loop sees the new credit).
    this.#pumping = true;
    const whole = chunk;
    // Several frames leave in one write (a large chunk from a socket's own reads); one goes as it is.
    chunk =
      whole.length <= MAX_DATA_FRAME ? this.#sendInCredit(whole) : this.#sink.together(() => this.#sendInCredit(whole));
    this.#pumping = false;
    if (chunk.length > 0) {
      this.#pending = chunk;
      return;
    }
    const cb = this.#pendingCb;
    this.#pending = null;
    this.#pendingCb = null;
    if (!cb) return;
    if (this.#sink.blocked) this.#sink.whenDrained(() => this.#wrote(cb));
    else this.#wrote(cb);
  }

  /** Sends what the peer's credit covers of `chunk` as DATA frames; returns the rest. */
  #sendInCredit(chunk: Buffer): Buffer {
    while (chunk.length > 0 && this.#sendCredit > 0) {
      const n = Math.min(chunk.length, this.#sendCredit, MAX_DATA_FRAME);
      this.#sendCredit -= n;
      this.#sentTotal += n;
      this.#sink.sendFrame(FrameKind.DATA, this.id, n === chunk.length ? chunk : chunk.subarray(0, n));
      chunk = n === chunk.length ? EMPTY : chunk.subarray(n);
    }
    return chunk;
  }

  #wrote(cb: (err?: Error | null) => void): void {
    this.#writing = false;
    cb();
  }

  #maybeForget(): void {
    if (this.#localEnded && this.#remoteEnded) this.#sink.forget(this.id);
  }
}

const EMPTY = Buffer.alloc(0);
function ignoreError(): void {
  // See the constructor: listeners the user adds still get the error; this one only keeps it from being unhandled.
}
