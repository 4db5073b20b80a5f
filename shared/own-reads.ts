// Sockets that read into buffers of their own (net's `onread`), grown to 1 MiB while a connection moves bulk data: one
// read and one write to the tunnel per MiB instead of per 64 KiB, and no fresh 64 KiB buffer per read for the GC to
// free (what Node does otherwise). A relay process spends its CPU in those syscalls and the wake-ups of its peers:
// moving 1 GiB through a Node relay took 1.0–1.1 s of CPU with socket.pipe() and 0.4–0.5 s reading into a 1 MiB buffer
// of its own (docs/benchmarks.md). The reader hands each chunk on as a view of the buffer and says whether it kept it.
import { connect, Socket, type NetConnectOpts } from 'node:net';
import { pool } from './buffer-pool.js';

/**
 * What a reader did with a chunk: let its buffer be read into again ('released'); kept a reference to it ('kept': the
 * next read goes into a new buffer); or holds it until it calls release() ('lent': reading stops until then, and goes
 * on into the same buffer).
 */
export type Taken = 'released' | 'kept' | 'lent';

/** A socket's own reads: nothing is read until start(); each chunk is handed to `take`. */
export interface OwnReads {
  start(take: (chunk: Buffer) => Taken): void;
  /**
   * The reader is done with the chunk it lent: reading goes on, and the buffer goes back to the pool if the reads
   * moved to another one meanwhile (they grew or shrank) or the socket closed.
   */
  release(): void;
}

/**
 * The first buffer, and the one a connection returns to after a small read: an idle connection holds no more than this
 * (1 000 connections: 16 MiB of address space, a page each in memory until they read more).
 */
export const MIN_BUFFER = 16 * 1024;
/** The largest buffer: past 1 MiB per read the CPU per byte no longer falls (256 KiB: 0.6 s per GiB, 1 MiB: 0.45). */
export const MAX_BUFFER = 1024 * 1024;
/** A read that fills its buffer grows the next one by this factor: 16 KiB to 1 MiB in three reads. */
const GROWTH = 4;

const owned = new WeakMap<Socket, OwnReads>();

/** The socket's own reads, when it was made by connectOwnReads() or adoptOwnReads(); else undefined. */
export function ownReads(socket: Socket): OwnReads | undefined {
  return owned.get(socket);
}

/** net.connect() with own reads: nothing is read until ownReads(socket).start(). */
export function connectOwnReads(options: NetConnectOpts): Socket {
  const reads = new BufferedReads();
  const socket = connect({ ...options, onread: reads.onread });
  // Held until start(): the connect completes meanwhile, the reading waits for the one who takes the bytes.
  socket.pause();
  return reads.attach(socket);
}

/**
 * Takes over a connection accepted by a server created with `pauseOnConnect: true`, before anything was read from it:
 * the returned socket, on the same connection, reads into its own buffers once ownReads(socket).start() runs. Node's
 * server has no `onread` of its own, so the connection's handle moves to a socket that has one; the accepted socket
 * is then destroyed without it (the server stops counting it; the connection stays open). A connection whose handle
 * cannot be taken (another kind of stream) is returned as it is, read by Node.
 */
export function adoptOwnReads(accepted: Socket, options: { allowHalfOpen?: boolean } = {}): Socket {
  const handle = (accepted as unknown as { _handle?: { readStart?: unknown } | null })._handle;
  if (!handle || typeof handle.readStart !== 'function' || accepted.bytesRead > 0) return accepted;
  (accepted as unknown as { _handle: null })._handle = null;
  accepted.destroy();
  const reads = new BufferedReads();
  // pauseOnCreate: the handle stays stopped until start() (Node's own option for handles handed over, as the
  // server's is).
  const socket = new Socket({
    handle,
    allowHalfOpen: options.allowHalfOpen,
    onread: reads.onread,
    pauseOnCreate: true,
  } as ConstructorParameters<typeof Socket>[0]);
  return reads.attach(socket);
}

class BufferedReads implements OwnReads {
  #socket: Socket | undefined;
  #buffer = pool.take(MIN_BUFFER);
  /** The buffer the reader holds until release(), if any: it goes back to the pool then, unless still read into. */
  #lent: Buffer | undefined;
  #closed = false;
  #take: ((chunk: Buffer) => Taken) | undefined;

  /** The `onread` option: the buffer for each read (called before every read), and the chunk read into it. */
  readonly onread = {
    buffer: (): Buffer => this.#buffer,
    callback: (bytes: number, buffer: Buffer): boolean => {
      const size = buffer.length;
      const taken = this.#take ? this.#take(buffer.subarray(0, bytes)) : 'kept';
      const next = bytes === size ? Math.min(size * GROWTH, MAX_BUFFER) : bytes * 16 <= size ? MIN_BUFFER : size;
      if (taken === 'lent') this.#lent = buffer;
      if (taken === 'kept' || (taken === 'lent' && next !== size)) {
        // The reader holds the chunk: the next read goes into another buffer (a lent one is kept only at its size).
        this.#buffer = pool.take(next);
      } else if (next !== size) {
        pool.give(buffer);
        this.#buffer = pool.take(next);
      }
      return taken !== 'lent';
    },
  };

  /** Ties these reads to their socket: its buffers go back to the pool when the socket closes (a lent one later). */
  attach(socket: Socket): Socket {
    this.#socket = socket;
    owned.set(socket, this);
    socket.once('close', () => {
      this.#closed = true;
      if (this.#buffer !== this.#lent) pool.give(this.#buffer);
    });
    return socket;
  }

  start(take: (chunk: Buffer) => Taken): void {
    this.#take = take;
    this.#socket?.resume();
  }

  release(): void {
    const lent = this.#lent;
    this.#lent = undefined;
    if (lent && (lent !== this.#buffer || this.#closed)) pool.give(lent);
    if (!this.#closed) this.#socket?.resume();
  }
}
