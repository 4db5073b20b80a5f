// The stream multiplexer: control messages plus many concurrent byte streams (opened from either side, with half-close,
// reset and per-stream credit flow control) over one Duplex connection — a TCP socket or the port-forward WebSocket.
import { EventEmitter } from 'node:events';
import type { Duplex } from 'node:stream';
import type * as z from 'zod/mini';
import {
  DEFAULT_MAX_FRAME,
  FrameDecoder,
  FrameEncoder,
  FrameKind,
  MAX_DATA_FRAME,
  ProtocolError,
  decodeCredit,
  decodeJson,
  encodeReason,
} from './codec.js';
import { BugError } from './errors.js';
import { AgentMessage, ClientMessage, StreamAccept, StreamOpen, incomingOpen } from './protocol.js';
import { MuxStream, type StreamSink } from './mux-stream.js';

export { ProtocolError } from './codec.js';
export { MuxStream, StreamResetError, MuxClosedError } from './mux-stream.js';
import { MuxClosedError } from './mux-stream.js';

/**
 * Every stream starts with this much credit in each direction (256 KiB), known to both sides without a round trip, so
 * the first bytes of a stolen request leave at once. It is also the default receive window: large enough that one
 * stream keeps loopback and a port-forward busy between credit updates, small enough that 1 000 stalled streams cost
 * at most 256 MiB in the worst case and typically nothing (credit only bounds, nothing is preallocated).
 */
export const INITIAL_WINDOW = 256 * 1024;
/**
 * A stream's receive window grows up to this (32 MiB) while its reader keeps up with a path slower than its window
 * (see MuxStream.grantCredit): 32 MiB covers 1.6 GiB/s at 20 ms RTT, or 320 MiB/s at 100 ms, as Linux's TCP does when
 * tcp_rmem allows it; over a 20 ms line a fixed 16 MiB window held one stream to ~0.4× raw TCP, 32 MiB to ~0.5×.
 */
export const MAX_WINDOW = 32 * 1024 * 1024;
/**
 * What all streams of one connection may grow their windows by in total, beyond the window each starts with (64 MiB):
 * the most a tunnel's peer can make this side hold on top of the fixed windows, however many streams grow at once.
 */
export const WINDOW_BUDGET = 64 * 1024 * 1024;
/**
 * Open streams per connection (10 000): ten times what the agent is sized for (1 000 stolen connections), and a bound
 * on what a peer can make this side hold (each stream buffers at most one window).
 */
export const MAX_STREAMS = 10_000;
/** After close(), how long the peer gets to read our GOAWAY and close its side before the connection is destroyed. */
const CLOSE_GRACE_MS = 2000;

export type Side = 'client' | 'agent';
type Outbound<S extends Side> = S extends 'client' ? ClientMessage : AgentMessage;
type Inbound<S extends Side> = S extends 'client' ? AgentMessage : ClientMessage;

export interface MuxOptions<S extends Side> {
  side: S;
  /** This side's receive window per stream in bytes when it opens (default and minimum: INITIAL_WINDOW). */
  window?: number;
  /** Largest receive window a stream grows to (default MAX_WINDOW; `window` turns growth off). */
  maxWindow?: number;
  /** Total growth of all streams' windows on this connection (default WINDOW_BUDGET). */
  windowBudget?: number;
  /** Largest frame payload accepted from the peer (default 1 MiB; at least MAX_DATA_FRAME). */
  maxFrame?: number;
  /** Streams open at once on this connection (default MAX_STREAMS); the peer's OPEN beyond it is reset. */
  maxStreams?: number;
}

export interface Mux<S extends Side> {
  on(event: 'message', listener: (msg: Inbound<S>) => void): this;
  on(event: 'stream', listener: (stream: MuxStream) => void): this;
  on(event: 'close', listener: (err?: Error) => void): this;
  once(event: 'message', listener: (msg: Inbound<S>) => void): this;
  once(event: 'stream', listener: (stream: MuxStream) => void): this;
  once(event: 'close', listener: (err?: Error) => void): this;
  off(event: 'message', listener: (msg: Inbound<S>) => void): this;
  off(event: 'stream', listener: (stream: MuxStream) => void): this;
  off(event: 'close', listener: (err?: Error) => void): this;
}

/**
 * One multiplexed connection. The client (CLI) opens odd stream ids, the agent even ones. Emits 'message' (a validated
 * peer control message), 'stream' (a stream the peer opened) and 'close' once (undefined after a local close(), else
 * the reason: a ProtocolError for a bad frame, a MuxClosedError when the peer or the connection went away).
 */
export class Mux<S extends Side = Side> extends EventEmitter implements StreamSink {
  readonly side: S;
  readonly window: number;
  /** @internal */ readonly maxWindow: number;
  readonly #maxStreams: number;
  /** Bytes the streams' windows may still grow by, together (WINDOW_BUDGET less what open streams took). */
  #windowBudgetLeft: number;
  /** Shortest credit round trip seen on this connection (ms), or Infinity before the first: see noteRoundTrip(). */
  #minRoundTripMs = Infinity;
  readonly #conn: Duplex;
  readonly #decoder: FrameDecoder;
  readonly #encoder = new FrameEncoder();
  readonly #outbound: typeof ClientMessage | typeof AgentMessage;
  readonly #inbound: typeof ClientMessage | typeof AgentMessage;
  readonly #streams = new Map<number, MuxStream>();
  #nextId: number;
  #lastPeerId = 0;
  #flushScheduled = false;
  /**
   * Whether this turn of the event loop has flushed: 'now' while the callback that flushed first still runs (its later
   * frames leave at once too), 'earlier' once it has returned, until the check phase (setImmediate). Frames made in the
   * 'earlier' state — the answers of other sockets whose reads the same poll delivers — wait for the check phase and
   * leave together: one write, and one message for each process down the line, instead of one per answer.
   */
  #turn: 'none' | 'now' | 'earlier' = 'none';
  /**
   * True while an incoming chunk is decoded, or while together() runs: frames made meanwhile are batched and written
   * when it is done.
   */
  #holding = false;
  #blocked = false;
  #drainWaiters: Array<() => void> = [];
  /** Flushes written so far, and those the connection has finished writing (its write callbacks come in order). */
  #flushes = 0;
  #flushesWritten = 0;
  /** Waiting for the flush that carries their payloads to be written (whenWritten). */
  #writtenWaiters: Array<{ flush: number; fn: () => void }> = [];
  #closed = false;
  /** When the connection last gave us bytes (Date.now()): a tunnel busy with data is alive though no message came. */
  #lastReadAt = Date.now();
  /** True when the connection gathers corked writes (net.Socket, the port-forward stream); else flushes are joined. */
  readonly #gathers: boolean;

  constructor(conn: Duplex, options: MuxOptions<S>) {
    super();
    const window = options.window ?? INITIAL_WINDOW;
    const maxFrame = options.maxFrame ?? DEFAULT_MAX_FRAME;
    // Every stream starts with INITIAL_WINDOW of credit, so a smaller window could not be honoured at the start.
    if (!Number.isInteger(window) || window < INITIAL_WINDOW) {
      throw new BugError(`mux window must be an integer >= ${INITIAL_WINDOW}, got ${window}`);
    }
    if (maxFrame < MAX_DATA_FRAME) throw new BugError(`mux maxFrame must be >= ${MAX_DATA_FRAME}, got ${maxFrame}`);
    this.side = options.side;
    this.window = window;
    this.maxWindow = Math.max(window, options.maxWindow ?? MAX_WINDOW);
    this.#windowBudgetLeft = options.windowBudget ?? WINDOW_BUDGET;
    this.#maxStreams = options.maxStreams ?? MAX_STREAMS;
    this.#conn = conn;
    this.#gathers = typeof (conn as { _writev?: unknown })._writev === 'function';
    // Frames are already coalesced per tick; Nagle would only hold a small reply (a CREDIT, an HTTP answer) for an ACK.
    const socket = conn as { setNoDelay?: (on: boolean) => unknown };
    if (typeof socket.setNoDelay === 'function') socket.setNoDelay(true);
    this.#nextId = options.side === 'client' ? 1 : 2;
    this.#outbound = options.side === 'client' ? ClientMessage : AgentMessage;
    this.#inbound = options.side === 'client' ? AgentMessage : ClientMessage;
    this.#decoder = new FrameDecoder((kind, id, payload) => this.#onFrame(kind, id, payload), maxFrame);
    conn.on('data', this.#onData);
    conn.on('end', this.#onEnd);
    conn.on('error', this.#onError);
    conn.on('close', this.#onConnClose);
    conn.on('drain', this.#onDrain);
  }

  /** When the connection last gave us bytes (Date.now()). */
  get lastReadAt(): number {
    return this.#lastReadAt;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Number of streams currently open (for diagnostics and tests). */
  get streamCount(): number {
    return this.#streams.size;
  }

  /** Sends a control message (validated against this side's union). Returns false if the mux is already closed. */
  send(msg: Outbound<S>): boolean {
    const parsed = this.#outbound.safeParse(msg);
    if (!parsed.success)
      throw new BugError(`invalid ${this.side} message ${JSON.stringify(msg)}: ${parsed.error.message}`);
    if (this.#closed) return false;
    const payload = Buffer.from(JSON.stringify(parsed.data), 'utf8');
    if (payload.length > DEFAULT_MAX_FRAME)
      throw new BugError(`control message of ${payload.length} bytes exceeds the frame limit`);
    this.#queue(FrameKind.CONTROL, 0, payload);
    return true;
  }

  /** Opens a stream to the peer; data may be written at once (up to the initial window before the peer's credit). */
  openStream(open: StreamOpen): MuxStream {
    const parsed = StreamOpen.safeParse(open);
    if (!parsed.success) throw new BugError(`invalid stream header ${JSON.stringify(open)}: ${parsed.error.message}`);
    const id = this.#nextId;
    if (id > 0xffffffff) throw new BugError('stream ids exhausted on this connection');
    this.#nextId += 2;
    const stream = new MuxStream(this, id, parsed.data, this.window, INITIAL_WINDOW);
    if (this.#closed) {
      process.nextTick(() => stream.destroy(new MuxClosedError('connection already closed')));
      return stream;
    }
    this.#streams.set(id, stream);
    this.#queue(FrameKind.OPEN, id, Buffer.from(JSON.stringify(parsed.data), 'utf8'));
    stream.grantCredit();
    return stream;
  }

  /**
   * Runs `fn`; the frames it makes leave together when it returns, in one write (e.g. a new stream's OPEN and the
   * traffic event that announces it): one write here and one wake-up of the peer, not one per frame.
   */
  together<T>(fn: () => T): T {
    if (this.#holding) return fn();
    this.#holding = true;
    try {
      return fn();
    } finally {
      this.#holding = false;
      if (!this.#flushScheduled && this.#encoder.pendingBytes > 0) this.#flush();
    }
  }

  /** Closes the connection: tells the peer why, ends every open stream with a MuxClosedError, emits 'close'. */
  close(reason = 'closed'): void {
    if (this.#closed) return;
    this.#queue(FrameKind.GOAWAY, 0, encodeReason(reason));
    this.#shutdown(new MuxClosedError(reason), undefined);
  }

  // ---- StreamSink: what MuxStream calls ----

  /** @internal */ sendFrame(kind: FrameKind, id: number, payload?: Buffer): void {
    if (!this.#closed) this.#queue(kind, id, payload);
  }
  /** @internal */ get blocked(): boolean {
    return this.#blocked;
  }
  /** @internal */ get holdsPayloads(): boolean {
    // A connection that does not gather copies the frames of a flush into one buffer (#flush): only the queue holds.
    return this.#encoder.pendingBytes > 0 || (this.#gathers && this.#conn.writableLength > 0);
  }
  /** @internal */ whenWritten(fn: () => void): void {
    // Frames still queued leave with the next flush; the others left with the last one.
    const flush = this.#encoder.pendingBytes > 0 ? this.#flushes + 1 : this.#flushes;
    // Never from within the caller (it may be about to stop what fn restarts).
    if (flush <= this.#flushesWritten) process.nextTick(fn);
    else this.#writtenWaiters.push({ flush, fn });
  }
  /** @internal */ whenDrained(fn: () => void): void {
    this.#drainWaiters.push(fn);
  }
  /** @internal */ forget(id: number): void {
    const stream = this.#streams.get(id);
    if (stream === undefined) return;
    this.#windowBudgetLeft += stream.receiveWindow - this.window;
    this.#streams.delete(id);
  }
  /** @internal */ reserveWindow(bytes: number): number {
    const granted = Math.min(bytes, this.#windowBudgetLeft);
    this.#windowBudgetLeft -= granted;
    return granted;
  }
  /** @internal */ noteRoundTrip(ms: number): void {
    if (ms < this.#minRoundTripMs) this.#minRoundTripMs = ms;
  }
  /** @internal */ get roundTripMs(): number {
    return this.#minRoundTripMs;
  }
  /** Bytes the streams' receive windows may still grow by, together (for diagnostics and tests). */
  get windowBudgetLeft(): number {
    return this.#windowBudgetLeft;
  }
  /** @internal */ get isClosed(): boolean {
    return this.#closed;
  }

  // ---- writing ----

  /**
   * A frame leaves at once when nothing is queued before it and the connection holds nothing unsent: a stolen request
   * is on its way before the event loop moves on (deferring it to the end of the tick costs ~20–40 µs per hop on a cold
   * process; bench/steal.ts). Otherwise it joins a batch: the frames made while one incoming chunk is decoded leave
   * together when it is done, those queued behind a busy connection leave in one write at the end of the tick, and
   * those of a turn's later callbacks (#turn) leave in one write in its check phase: under 32 connections, the
   * session's writes per request went from 2.00 to 1.16, the port-forward relay's from 1.11 to 0.25 (bench/load.ts).
   */
  #queue(kind: FrameKind, id: number, payload?: Buffer): void {
    this.#encoder.frame(kind, id, payload);
    if (this.#flushScheduled || this.#holding) return;
    if (this.#turn === 'earlier') {
      this.#flushScheduled = true;
      return;
    }
    if (this.#conn.writableLength === 0) {
      this.#flush();
      return;
    }
    this.#flushScheduled = true;
    process.nextTick(this.#flush);
  }

  readonly #flush = (): void => {
    this.#flushScheduled = false;
    const chunks = this.#encoder.take();
    if (chunks.length === 0 || this.#conn.destroyed || this.#conn.writableEnded) return;
    if (this.#turn === 'none') {
      this.#turn = 'now';
      process.nextTick(this.#endCallback);
      setImmediate(this.#endTurn);
    }
    this.#flushes++;
    let ok: boolean;
    // One callback per flush, on its last write: whenWritten() counts them.
    if (chunks.length === 1) {
      ok = this.#conn.write(chunks[0], this.#written);
    } else if (this.#gathers) {
      this.#conn.cork();
      const last = chunks.length - 1;
      for (let i = 0; i < last; i++) this.#conn.write(chunks[i]);
      this.#conn.write(chunks[last], this.#written);
      this.#conn.uncork();
      ok = !this.#conn.writableNeedDrain;
    } else {
      // A connection without writev (one message per write) gets one buffer per flush.
      ok = this.#conn.write(Buffer.concat(chunks), this.#written);
    }
    if (!ok) this.#blocked = true;
  };

  /** The callback that flushed first this turn has returned. */
  readonly #endCallback = (): void => {
    if (this.#turn === 'now') this.#turn = 'earlier';
  };

  /** The event loop's check phase: what the turn's later callbacks queued leaves now, in one write. */
  readonly #endTurn = (): void => {
    this.#turn = 'none';
    if (this.#flushScheduled) this.#flush();
  };

  /** A flush's last write is done (or failed): the payloads of that flush and of every one before it are free. */
  readonly #written = (): void => {
    this.#flushesWritten++;
    const waiters = this.#writtenWaiters;
    while (waiters.length > 0 && waiters[0].flush <= this.#flushesWritten) (waiters.shift() as { fn: () => void }).fn();
  };

  readonly #onDrain = (): void => {
    this.#blocked = false;
    const waiters = this.#drainWaiters;
    this.#drainWaiters = [];
    for (const fn of waiters) fn();
  };

  // ---- reading ----

  readonly #onData = (chunk: Buffer | string): void => {
    if (this.#closed) return;
    this.#lastReadAt = Date.now();
    this.#holding = true;
    try {
      this.#decoder.push(typeof chunk === 'string' ? Buffer.from(chunk) : chunk);
    } catch (err) {
      this.#holding = false;
      this.#fail(err);
      return;
    }
    this.#holding = false;
    // What the frames of this chunk made (credit, answers) leaves now, in one write, unless a tick flush is due anyway.
    if (!this.#flushScheduled && this.#encoder.pendingBytes > 0) this.#flush();
  };

  #onFrame(kind: FrameKind, id: number, payload: Buffer): void {
    if (this.#closed) return;
    switch (kind) {
      case FrameKind.DATA: {
        if (payload.length > 0) this.#streams.get(id)?.receiveData(payload);
        return;
      }
      case FrameKind.CREDIT: {
        const increment = decodeCredit(payload);
        this.#streams.get(id)?.receiveCredit(increment);
        return;
      }
      case FrameKind.END:
        this.#streams.get(id)?.receiveEnd();
        return;
      case FrameKind.RESET:
        this.#streams.get(id)?.receiveReset(payload.toString('utf8'));
        return;
      case FrameKind.ACCEPT: {
        const stream = this.#streams.get(id);
        if (stream)
          stream.receiveAccept(decodeJson(payload.length ? payload : Buffer.from('{}'), StreamAccept, 'ACCEPT'));
        return;
      }
      case FrameKind.OPEN:
        this.#onOpen(id, payload);
        return;
      case FrameKind.CONTROL: {
        const msg = decodeJson(payload, this.#inbound as z.ZodMiniType<unknown>, 'control message') as Inbound<S>;
        this.#emitSafely('message', msg);
        return;
      }
      case FrameKind.GOAWAY: {
        const reason = payload.toString('utf8') || 'closed';
        this.#shutdown(
          new MuxClosedError(`peer closed the connection: ${reason}`, reason),
          new MuxClosedError(`peer closed the connection: ${reason}`, reason),
        );
        return;
      }
    }
  }

  #onOpen(id: number, payload: Buffer): void {
    const peerParity = this.side === 'client' ? 0 : 1;
    if (id % 2 !== peerParity)
      throw new ProtocolError(`malformed frame: peer opened stream ${id} with this side's parity`);
    if (id <= this.#lastPeerId)
      throw new ProtocolError(`malformed frame: stream id ${id} reused (last was ${this.#lastPeerId})`);
    this.#lastPeerId = id;
    const open = decodeJson(payload, StreamOpen, 'stream header', incomingOpen);
    const stream = new MuxStream(this, id, open, this.window, INITIAL_WINDOW);
    this.#streams.set(id, stream);
    if (this.listenerCount('stream') === 0) {
      stream.reset('no handler for new streams');
      return;
    }
    if (this.#streams.size > this.#maxStreams) {
      stream.reset(`too many open streams (limit ${this.#maxStreams})`);
      return;
    }
    stream.grantCredit();
    this.#emitSafely('stream', stream);
  }

  /** A listener that throws must not leave the decoder mid-chunk: rethrow it on a later tick instead. */
  #emitSafely(event: string, arg: unknown): void {
    try {
      this.emit(event, arg);
    } catch (err) {
      process.nextTick(() => {
        throw err;
      });
    }
  }

  readonly #onEnd = (): void => {
    if (this.#closed) return;
    try {
      this.#decoder.end();
    } catch (err) {
      this.#fail(err);
      return;
    }
    const err = new MuxClosedError('connection closed by the peer');
    this.#shutdown(err, err);
  };

  readonly #onError = (err: Error): void => {
    if (this.#closed) return;
    const closed = new MuxClosedError(`connection failed: ${err.message}`);
    this.#shutdown(closed, closed);
  };

  readonly #onConnClose = (): void => {
    if (this.#closed) return;
    const err = new MuxClosedError('connection closed');
    this.#shutdown(err, err);
  };

  #fail(err: unknown): void {
    const error = err instanceof Error ? err : new ProtocolError(String(err));
    this.#queue(FrameKind.GOAWAY, 0, encodeReason(`protocol error: ${error.message}`));
    this.#shutdown(error, error);
  }

  /**
   * Ends every stream with `streamErr`, flushes what is queued (GOAWAY), ends the connection, emits 'close'(closeErr).
   */
  #shutdown(streamErr: Error, closeErr: Error | undefined): void {
    if (this.#closed) return;
    this.#closed = true;
    const streams = [...this.#streams.values()];
    this.#streams.clear();
    for (const stream of streams) stream.destroy(streamErr);
    this.#flushScheduled = false;
    this.#flush();
    const conn = this.#conn;
    conn.off('data', this.#onData);
    if (!conn.destroyed) {
      conn.end();
      const timer = setTimeout(() => conn.destroy(), CLOSE_GRACE_MS);
      timer.unref();
      conn.once('close', () => clearTimeout(timer));
    }
    const waiters = [...this.#drainWaiters, ...this.#writtenWaiters.map((w) => w.fn)];
    this.#drainWaiters = [];
    this.#writtenWaiters = [];
    for (const fn of waiters) fn();
    this.emit('close', closeErr);
  }
}

export type ClientMux = Mux<'client'>;
export type AgentMux = Mux<'agent'>;

/** The CLI's side of a connection to the agent. */
export function createClientMux(conn: Duplex, options: Omit<MuxOptions<'client'>, 'side'> = {}): ClientMux {
  return new Mux(conn, { ...options, side: 'client' });
}

/** The agent's side of a connection from the CLI. */
export function createAgentMux(conn: Duplex, options: Omit<MuxOptions<'agent'>, 'side'> = {}): AgentMux {
  return new Mux(conn, { ...options, side: 'agent' });
}
