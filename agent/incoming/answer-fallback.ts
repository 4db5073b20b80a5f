// Stolen connections with an answer deadline (admission webhooks): kube-apiserver gives a webhook timeoutSeconds to
// answer, and a local command paused in a debugger must not make the cluster's writes fail. Webhooks speak TLS, so the
// agent cannot see requests, only connections: it keeps the client's first bytes (the TLS ClientHello and what follows)
// until the local command sends its first byte back; if it has sent none by the deadline, the connection is replayed
// to the pod's own server, which then answers. A connection is closed once it idles after an answer (the local
// command's or the pod's), so that the client's next request comes on a new connection: one that can fall back in its
// turn, or that goes to the local command again once it answers.
import { connect, type Socket } from 'node:net';
import { joinBothWays } from '../../shared/splice.js';
import { resetStream, type IncomingStream } from './subscription.js';

/**
 * Client bytes kept for a replay: a ClientHello and an AdmissionReview fit; past this, no fallback (bounded memory).
 */
export const REPLAY_LIMIT_BYTES = 4 * 1024 * 1024;
/**
 * How long an answered connection may sit idle after the local command spoke last before it is closed. Short enough
 * that the client's next request comes on a fresh connection (which can fall back), long enough for a TLS handshake's
 * round trips and an answer's last records.
 */
export const ANSWERED_IDLE_CLOSE_MS = 500;

export interface FallbackRelay {
  /** Resolves when both sides closed, with the client socket's byte counts and whether the pod answered. */
  done: Promise<{ in: number; out: number; fellBack: boolean }>;
}

/**
 * Relays `socket` ↔ `stream` (the local command); if the stream has sent nothing within `deadlineMs` (or failed before
 * its first byte), resets it and relays `socket` ↔ the pod's server at `origin` instead, replaying what the client
 * sent. `onFallback` is told after how long.
 */
export function relayWithFallback(
  socket: Socket,
  stream: IncomingStream,
  deadlineMs: number,
  origin: { host: string; port: number },
  onFallback: (afterMs: number) => void,
): FallbackRelay {
  const held: Buffer[] = [];
  let heldBytes = 0;
  let replayable = true;
  let answered = false;
  let fellBack = false;
  let idle: NodeJS.Timeout | undefined;

  /** Whoever answers now: the local command's stream, or the pod's server after a fallback. */
  let answerer: { end(): unknown } = stream;
  const idleClose = (): void => {
    // The answering side spoke last and nothing moved since: an answer is complete (or the handshake stalled).
    socket.end();
    answerer.end();
  };
  const touch = (localSpokeLast: boolean): void => {
    if (idle) clearTimeout(idle);
    idle = localSpokeLast ? setTimeout(idleClose, ANSWERED_IDLE_CLOSE_MS) : undefined;
  };

  const fromClient = (chunk: Buffer): void => {
    if (answered) {
      touch(false);
      return;
    }
    if (!replayable) return;
    heldBytes += chunk.length;
    if (heldBytes > REPLAY_LIMIT_BYTES) {
      replayable = false;
      held.length = 0;
    } else held.push(chunk);
  };
  const fromLocal = (chunk: Buffer): void => {
    if (!answered) {
      answered = true;
      clearTimeout(deadline);
      held.length = 0;
    }
    touch(true);
    if (!socket.write(chunk)) {
      stream.pause();
      socket.once('drain', () => stream.resume());
    }
  };
  socket.on('data', fromClient);
  socket.pipe(stream);
  stream.on('data', fromLocal);
  const localEnded = (): void => void socket.end();
  stream.once('end', localEnded);

  const started = Date.now();
  const fallBack = (): void => {
    if (answered || !replayable || socket.destroyed || fellBack) return;
    fellBack = true;
    socket.unpipe(stream);
    socket.off('data', fromClient);
    stream.off('data', fromLocal);
    stream.off('end', localEnded);
    resetStream(stream, `not answered within ${deadlineMs} ms: the pod answers`);
    const upstream = connect({ host: origin.host, port: origin.port, noDelay: true, allowHalfOpen: true });
    upstream.on('error', () => socket.destroy());
    socket.on('error', () => upstream.destroy());
    upstream.write(Buffer.concat(held));
    held.length = 0;
    if (socket.readableEnded) upstream.end();
    joinBothWays(socket, upstream);
    // The pod's connection is closed once idle too: the request after this one goes to the local command again.
    answerer = upstream;
    upstream.on('data', () => touch(true));
    socket.on('data', () => touch(false));
    socket.once('close', () => upstream.destroy());
    upstream.once('close', () => socket.destroy());
    onFallback(Date.now() - started);
  };
  const deadline = setTimeout(fallBack, deadlineMs);

  const done = new Promise<{ in: number; out: number; fellBack: boolean }>((resolve) => {
    socket.once('close', () => {
      clearTimeout(deadline);
      if (idle) clearTimeout(idle);
      if (!fellBack) {
        // A client that vanished without a FIN (reset) takes the local side down too.
        if (!socket.readableEnded) resetStream(stream, 'client connection reset');
        else stream.end();
      }
      resolve({ in: socket.bytesRead, out: socket.bytesWritten, fellBack });
    });
  });
  stream.on('error', () => {
    // The local side failed before it answered (its command does not listen, or crashed): the pod answers at once.
    if (!answered && replayable) fallBack();
    else if (!fellBack) socket.destroy();
  });
  socket.on('error', () => {
    if (!fellBack) resetStream(stream, 'client connection error');
  });
  return { done };
}
