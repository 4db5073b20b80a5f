// Joins a mux stream and a socket both ways — what socket.pipe(stream).pipe(socket) does — without a Writable and a
// Readable per chunk in between: a chunk read from the socket leaves as DATA frames at once when the peer's credit
// covers it, and the peer's DATA is written to the socket as it is decoded. This is the hot path of every stolen
// connection (in the agent and in the CLI) and of outgoing connections; backpressure and half-close behave as with pipe.
import type { Socket } from 'node:net';
import type { MuxStream } from './mux-stream.js';

/**
 * Splices `socket` and `stream` (both directions, with half-close). Errors and teardown stay with the caller, as with
 * pipe(). After this, the stream's Readable side emits no 'data' (it only ends): count bytes on the socket instead.
 */
export function spliceSocket(stream: MuxStream, socket: Socket): void {
  stream.deliverTo(socket);
  socket.on('data', (chunk: Buffer) => {
    if (stream.sendNow(chunk)) return;
    // Out of credit, the connection backed up, or bytes already queued: the Writable side keeps the order and the bound.
    if (!stream.write(chunk)) {
      socket.pause();
      stream.once('drain', () => socket.resume());
    }
  });
  socket.once('end', () => stream.end());
  socket.resume(); // as pipe() does: a socket paused while its peer was being set up starts flowing now
}
