// Frame codec of the devop wire: length-prefixed binary frames (length, kind byte, stream id, payload), an incremental
// decoder that never buffers more than one frame and rejects bad input with a typed ProtocolError, and an encoder that
// packs headers (and small payloads) into shared slabs so a burst of frames leaves in a few large writes.
import type * as z from 'zod/mini';

/**
 * Frame layout (big-endian): u32 payload length | u8 kind | u32 stream id | payload.
 * Stream 0 is the connection itself (CONTROL, GOAWAY); every other kind names a stream id ≠ 0.
 * Kinds are only appended; changing the layout or a kind's meaning bumps PROTOCOL_VERSION.
 */
export const FrameKind = {
  /** JSON ClientMessage / AgentMessage, stream 0. */
  CONTROL: 0,
  /** Opens a stream; JSON StreamOpen. Odd ids are opened by the CLI, even ids by the agent. */
  OPEN: 1,
  /** Raw stream bytes (never JSON); at most MAX_DATA_FRAME, never beyond the receiver's credit. */
  DATA: 2,
  /** u32 (> 0): the receiver consumed data, the sender may send this many more bytes. */
  CREDIT: 3,
  /** Half-close: the sender will send no more DATA on this stream. Empty payload. */
  END: 4,
  /** Abort the stream in both directions; UTF-8 reason (e.g. "ECONNREFUSED"). */
  RESET: 5,
  /** The opened stream was accepted (e.g. the outgoing connect succeeded); JSON StreamAccept (may be empty). */
  ACCEPT: 6,
  /** The sender closes the connection; UTF-8 reason. Stream 0. */
  GOAWAY: 7,
} as const;
export type FrameKind = (typeof FrameKind)[keyof typeof FrameKind];
const LAST_KIND = FrameKind.GOAWAY;

export const FRAME_HEADER_SIZE = 9;
/**
 * Largest payload a decoder accepts by default (1 MiB). Control messages are small (an env read is the largest, tens of
 * KiB); the limit bounds what one frame can make the receiver buffer.
 */
export const DEFAULT_MAX_FRAME = 1024 * 1024;
/**
 * Senders cut stream data into frames of at most 64 KiB: one socket read on Linux loopback is up to 64 KiB, so bigger
 * frames would not save work, and smaller ones would add per-frame overhead. Every decoder must accept at least this.
 */
export const MAX_DATA_FRAME = 64 * 1024;
/** Longest RESET / GOAWAY reason kept (longer ones are cut): a reason is one line for a human. */
export const MAX_REASON_BYTES = 1024;

/** The peer sent something that is not a valid frame; the connection is closed with this reason. */
export class ProtocolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ProtocolError';
  }
}

/**
 * Called for every frame. DATA payloads may be delivered in several consecutive pieces (as they arrive from the
 * socket, without copying); every other kind is delivered whole. A handler may throw a ProtocolError.
 */
export type FrameHandler = (kind: FrameKind, streamId: number, payload: Buffer) => void;

const EMPTY = Buffer.alloc(0);
enum State {
  Header,
  Payload,
  Data,
}

/**
 * Incremental frame decoder. Feed socket chunks to push(); it calls the handler per frame and throws ProtocolError on
 * the first bad frame (after which it ignores all input). Buffers at most one frame's payload (≤ maxFrame).
 */
export class FrameDecoder {
  readonly #maxFrame: number;
  readonly #onFrame: FrameHandler;
  readonly #header = Buffer.alloc(FRAME_HEADER_SIZE);
  #headerFill = 0;
  #state = State.Header;
  #kind: FrameKind = FrameKind.CONTROL;
  #streamId = 0;
  #remaining = 0;
  #parts: Buffer[] = [];
  #partsLength = 0;
  #failed = false;

  constructor(onFrame: FrameHandler, maxFrame = DEFAULT_MAX_FRAME) {
    this.#onFrame = onFrame;
    this.#maxFrame = maxFrame;
  }

  /** Bytes held for an incomplete frame (for tests: bounded by maxFrame + header). */
  get bufferedBytes(): number {
    return this.#headerFill + this.#partsLength;
  }

  /** True when input ended on a frame boundary (so an end of input now is not a truncated frame). */
  get atFrameBoundary(): boolean {
    return this.#state === State.Header && this.#headerFill === 0;
  }

  push(chunk: Buffer): void {
    if (this.#failed) return;
    try {
      this.#push(chunk);
    } catch (err) {
      this.#failed = true;
      this.#parts = [];
      this.#partsLength = 0;
      throw err;
    }
  }

  /** Call at end of input: a partial frame is a ProtocolError (truncated). */
  end(): void {
    if (this.#failed || this.atFrameBoundary) return;
    this.#failed = true;
    throw new ProtocolError(`truncated frame: connection ended inside a frame (${this.bufferedBytes} bytes pending)`);
  }

  #push(chunk: Buffer): void {
    const n = chunk.length;
    let off = 0;
    while (off < n) {
      if (this.#state === State.Header) {
        if (this.#headerFill === 0 && n - off >= FRAME_HEADER_SIZE) {
          this.#startFrame(chunk.readUInt32BE(off), chunk[off + 4], chunk.readUInt32BE(off + 5));
          off += FRAME_HEADER_SIZE;
        } else {
          const take = Math.min(FRAME_HEADER_SIZE - this.#headerFill, n - off);
          chunk.copy(this.#header, this.#headerFill, off, off + take);
          this.#headerFill += take;
          off += take;
          if (this.#headerFill < FRAME_HEADER_SIZE) return;
          this.#headerFill = 0;
          this.#startFrame(this.#header.readUInt32BE(0), this.#header[4], this.#header.readUInt32BE(5));
        }
      } else if (this.#state === State.Data) {
        const take = Math.min(this.#remaining, n - off);
        this.#remaining -= take;
        if (this.#remaining === 0) this.#state = State.Header;
        const piece = take === n ? chunk : chunk.subarray(off, off + take);
        off += take;
        this.#onFrame(FrameKind.DATA, this.#streamId, piece);
      } else if (this.#partsLength === 0 && n - off >= this.#remaining) {
        const payload = chunk.subarray(off, off + this.#remaining);
        off += this.#remaining;
        this.#state = State.Header;
        this.#onFrame(this.#kind, this.#streamId, payload);
      } else {
        const take = Math.min(this.#remaining - this.#partsLength, n - off);
        this.#parts.push(chunk.subarray(off, off + take));
        this.#partsLength += take;
        off += take;
        if (this.#partsLength === this.#remaining) {
          const payload = Buffer.concat(this.#parts, this.#partsLength);
          this.#parts = [];
          this.#partsLength = 0;
          this.#state = State.Header;
          this.#onFrame(this.#kind, this.#streamId, payload);
        }
      }
    }
  }

  #startFrame(length: number, kind: number, streamId: number): void {
    if (kind > LAST_KIND) throw new ProtocolError(`malformed frame: unknown frame kind ${kind}`);
    if (length > this.#maxFrame) {
      throw new ProtocolError(`oversized frame: ${length} bytes exceeds the limit of ${this.#maxFrame}`);
    }
    const k = kind as FrameKind;
    checkFrameShape(k, streamId, length);
    if (length === 0) {
      this.#onFrame(k, streamId, EMPTY);
      return;
    }
    this.#kind = k;
    this.#streamId = streamId;
    this.#remaining = length;
    this.#state = k === FrameKind.DATA ? State.Data : State.Payload;
  }
}

function checkFrameShape(kind: FrameKind, streamId: number, length: number): void {
  const connectionLevel = kind === FrameKind.CONTROL || kind === FrameKind.GOAWAY;
  if (connectionLevel && streamId !== 0) {
    throw new ProtocolError(`malformed frame: kind ${kind} must be on stream 0, got stream ${streamId}`);
  }
  if (!connectionLevel && streamId === 0) throw new ProtocolError(`malformed frame: kind ${kind} on stream 0`);
  if (kind === FrameKind.CREDIT && length !== 4) {
    throw new ProtocolError(`malformed frame: CREDIT payload must be 4 bytes, got ${length}`);
  }
  if (kind === FrameKind.END && length !== 0)
    throw new ProtocolError(`malformed frame: END with a ${length}-byte payload`);
  if (kind === FrameKind.CONTROL && length === 0) throw new ProtocolError('malformed frame: empty CONTROL frame');
  if (kind === FrameKind.OPEN && length === 0) throw new ProtocolError('malformed frame: OPEN without a header');
  if ((kind === FrameKind.RESET || kind === FrameKind.GOAWAY) && length > MAX_REASON_BYTES) {
    throw new ProtocolError(`malformed frame: ${length}-byte reason exceeds ${MAX_REASON_BYTES}`);
  }
}

/**
 * Parses a JSON payload and validates it with `schema`; any failure is a ProtocolError naming `what`. `fast`, when
 * given, decides the common case without the schema: what it returns is taken, undefined leaves the value to `schema`.
 */
export function decodeJson<T>(
  payload: Buffer,
  schema: z.ZodMiniType<T>,
  what: string,
  fast?: (value: unknown) => T | undefined,
): T {
  let value: unknown;
  try {
    value = JSON.parse(payload.toString('utf8'));
  } catch {
    throw new ProtocolError(`malformed ${what}: not JSON`);
  }
  const known = fast?.(value);
  if (known !== undefined) return known;
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const at = issue && issue.path.length > 0 ? ` at ${issue.path.join('.')}` : '';
    throw new ProtocolError(`malformed ${what}${at}: ${issue?.message ?? 'invalid'}`);
  }
  return parsed.data;
}

/** Reads a CREDIT payload; a zero increment is a ProtocolError. */
export function decodeCredit(payload: Buffer): number {
  const increment = payload.readUInt32BE(0);
  if (increment === 0) throw new ProtocolError('malformed frame: CREDIT of 0 bytes');
  return increment;
}

/** A reason string cut to MAX_REASON_BYTES of UTF-8. */
export function encodeReason(reason: string): Buffer {
  const bytes = Buffer.from(reason, 'utf8');
  return bytes.length <= MAX_REASON_BYTES ? bytes : bytes.subarray(0, MAX_REASON_BYTES);
}

/** One frame as a single Buffer (for tests and rare frames; the mux uses FrameEncoder). */
export function encodeFrame(kind: FrameKind, streamId: number, payload: Buffer = EMPTY): Buffer {
  const frame = Buffer.allocUnsafe(FRAME_HEADER_SIZE + payload.length);
  writeHeader(frame, 0, kind, streamId, payload.length);
  payload.copy(frame, FRAME_HEADER_SIZE);
  return frame;
}

function writeHeader(buf: Buffer, off: number, kind: FrameKind, streamId: number, length: number): void {
  buf.writeUInt32BE(length, off);
  buf[off + 4] = kind;
  buf.writeUInt32BE(streamId, off + 5);
}

/** Payloads up to this size are copied next to their header (one iovec); larger ones are written by reference. */
const INLINE_PAYLOAD_MAX = 512;
/** Slab for headers and small payloads: big enough that allocations are rare, small enough to free quickly. */
const SLAB_SIZE = 64 * 1024;

/**
 * Collects outgoing frames as a list of buffers: headers and small payloads are packed contiguously into a slab (never
 * rewritten once handed out), large payloads are referenced, not copied. take() returns what to write, in order.
 */
export class FrameEncoder {
  #slab = Buffer.allocUnsafe(SLAB_SIZE);
  #used = 0;
  #regionStart = 0;
  #out: Buffer[] = [];
  #bytes = 0;

  /** Bytes queued since the last take(). */
  get pendingBytes(): number {
    return this.#bytes;
  }

  frame(kind: FrameKind, streamId: number, payload: Buffer = EMPTY): void {
    const inline = payload.length <= INLINE_PAYLOAD_MAX;
    const need = FRAME_HEADER_SIZE + (inline ? payload.length : 0);
    if (this.#used + need > SLAB_SIZE) {
      this.#closeRegion();
      this.#slab = Buffer.allocUnsafe(SLAB_SIZE);
      this.#used = 0;
      this.#regionStart = 0;
    }
    writeHeader(this.#slab, this.#used, kind, streamId, payload.length);
    this.#used += FRAME_HEADER_SIZE;
    if (inline) {
      if (payload.length > 0) payload.copy(this.#slab, this.#used);
      this.#used += payload.length;
    } else {
      this.#closeRegion();
      this.#out.push(payload);
    }
    this.#bytes += FRAME_HEADER_SIZE + payload.length;
  }

  /** The queued frames as buffers to write in order; the encoder is empty afterwards. */
  take(): Buffer[] {
    this.#closeRegion();
    const out = this.#out;
    this.#out = [];
    this.#bytes = 0;
    return out;
  }

  #closeRegion(): void {
    if (this.#used > this.#regionStart) this.#out.push(this.#slab.subarray(this.#regionStart, this.#used));
    this.#regionStart = this.#used;
  }
}
