// Byte-stream plumbing for the proxy: read exactly N bytes of a handshake from a socket, and join two duplex streams in
// both directions with half-close, so that neither side is left open when the other ends or fails.
import { finished, type Duplex, type Readable } from 'node:stream';
import { joinBothWays } from '../../shared/splice.js';

export class StreamEndedError extends Error {
  constructor(what: string) {
    super(`connection ended during ${what}`);
    this.name = 'StreamEndedError';
  }
}

/** Reads exactly `n` bytes (paused-mode reads, so that what follows stays in the stream for the next reader). */
export function readExactly(stream: Readable, n: number, what = 'handshake'): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const attempt = (): void => {
      const chunk = stream.read(n) as Buffer | null;
      if (chunk !== null) {
        cleanup();
        resolve(chunk);
      } else if (stream.readableEnded || stream.destroyed) {
        cleanup();
        reject(new StreamEndedError(what));
      }
    };
    const onEnd = (): void => {
      cleanup();
      // read(n) hands out a short final chunk only once the stream has ended; a short chunk is an incomplete message.
      reject(new StreamEndedError(what));
    };
    const onError = (err: Error): void => {
      cleanup();
      reject(err);
    };
    const cleanup = (): void => {
      stream.off('readable', attempt);
      stream.off('end', onEnd);
      stream.off('close', onEnd);
      stream.off('error', onError);
    };
    stream.on('readable', attempt);
    stream.once('end', onEnd);
    stream.once('close', onEnd);
    stream.once('error', onError);
    attempt();
  });
}

/**
 * Joins a and b: bytes flow both ways with backpressure, an end on one side half-closes the other, an error or a
 * premature close on either side destroys both (a clean close leaves the other side to flush). Resolves when both are
 * done.
 */
export function joinStreams(a: Duplex, b: Duplex): Promise<void> {
  const watch = (self: Duplex, other: Duplex): Promise<void> =>
    new Promise((resolve) => {
      finished(self, (err) => {
        if (err) {
          self.destroy();
          // A TCP peer learns of the failure as a reset (ECONNRESET), not as an end it could take for a complete
          // answer.
          const socket = other as Duplex & { resetAndDestroy?: () => void; connecting?: boolean };
          if (typeof socket.resetAndDestroy === 'function' && !socket.destroyed && !socket.connecting)
            socket.resetAndDestroy();
          else other.destroy();
        }
        resolve();
      });
    });
  // A local socket and a stream to the agent (the usual pair) take the splice fast path; anything else is piped.
  joinBothWays(a, b);
  return Promise.all([watch(a, b), watch(b, a)]).then(() => undefined);
}
