// Joins a mux stream and a socket both ways — what socket.pipe(stream).pipe(socket) does — without a Writable and a
// Readable per chunk in between: a chunk read from the socket leaves as DATA frames at once when the peer's credit
// covers it, and the peer's DATA is written to the socket as it is decoded. This is the hot path of every stolen
// connection (in the agent and in the CLI) and of outgoing connections; backpressure and half-close behave as with
// pipe.
import { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { MuxStream } from './mux-stream.js';
import { ownReads } from './own-reads.js';

/**
 * Joins two duplex streams both ways with half-close: a socket and a mux stream (in either order) through
 * spliceSocket, anything else as pipe() does. Errors and teardown stay with the caller.
 */
export function joinBothWays(a: Duplex, b: Duplex): void {
  if (a instanceof Socket && b instanceof MuxStream) spliceSocket(b, a);
  else if (b instanceof Socket && a instanceof MuxStream) spliceSocket(a, b);
  else {
    pipeTo(a, b);
    pipeTo(b, a);
  }
}

/** from.pipe(to), for a socket with its own reads too (they emit no 'data'). */
function pipeTo(from: Duplex, to: Duplex): void {
  const reads = from instanceof Socket ? ownReads(from) : undefined;
  if (!reads) {
    from.pipe(to);
    return;
  }
  from.on('end', () => to.end());
  reads.start((chunk) => {
    if (!to.write(chunk)) {
      from.pause();
      to.once('drain', () => from.resume());
    }
    return 'kept';
  });
}

/**
 * Splices `socket` and `stream` (both directions, with half-close). Errors and teardown stay with the caller, as with
 * pipe(). After this, the stream's Readable side emits no 'data' (it only ends): count bytes on the socket instead.
 */
export function spliceSocket(stream: MuxStream, socket: Socket): void {
  stream.deliverTo(socket);
  socket.on('end', () => stream.end()); // 'end' comes once: on() spares once()'s wrapper
  const reads = ownReads(socket);
  if (reads) {
    // The socket reads into a buffer of its own, lent until the connection has written what was read into it: the
    // next read waits for that write (the connection's backlog bounds what is read meanwhile) and reuses the buffer.
    const release = (): void => {
      reads.release();
    };
    const releaseWhenWritten = (): void => stream.whenWritten(release);
    reads.start((chunk) => {
      // Out of credit, or bytes already queued: the Writable side sends it in order, as credit comes.
      if (!stream.sendNow(chunk)) stream.write(chunk, releaseWhenWritten);
      else if (!stream.holdsPayloads) return 'released';
      else stream.whenWritten(release);
      return 'lent';
    });
    return;
  }
  socket.on('data', (chunk: Buffer) => {
    if (stream.sendNow(chunk)) return;
    // Out of credit, the connection backed up, or bytes already queued: the Writable side keeps the order and the
    // bound.
    if (!stream.write(chunk)) {
      socket.pause();
      stream.once('drain', () => socket.resume());
    }
  });
  socket.resume(); // as pipe() does: a socket paused while its peer was being set up starts flowing now
}
