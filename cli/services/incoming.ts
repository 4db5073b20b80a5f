// Incoming streams (a stolen or mirrored connection, or one filtered HTTP request, opened by the agent) are connected
// to 127.0.0.1:<local port>; for mirror, the local command's answers are read and dropped (the pod answers the client).
import type { Socket } from 'node:net';
import type { MuxStream } from '../../shared/mux.js';
import type { TrafficEvent } from '../../shared/protocol.js';
import { connectOwnReads, ownReads } from '../../shared/own-reads.js';
import { spliceSocket } from '../../shared/splice.js';
import type { ExchangeRecorder } from '../record/tap.js';
import type { PortMapping } from './ports.js';

export interface IncomingHandlerInput {
  ports: readonly PortMapping[];
  host?: string;
  onError?: (message: string) => void;
  /** `--record`: stolen HTTP exchanges go through it (and into the HAR) instead of being spliced. */
  recorder?: ExchangeRecorder;
  /**
   * The open and close events of a connection the agent leaves to the stream (its OPEN carries `connId`: the
   * stream-events feature), as the agent would have sent them; `pod` as the stream listener got it.
   */
  onConnection?: (event: ConnectionEvent, pod: string | undefined) => void;
}

export type ConnectionEvent = Extract<TrafficEvent, { kind: 'connection' }>;

/** Returns the 'stream' listener for the session's mux (which names the pod a stream comes from, when it knows). */
export function incomingStreamHandler(input: IncomingHandlerInput): (stream: MuxStream, pod?: string) => void {
  const host = input.host ?? '127.0.0.1';
  return (stream, pod) => {
    stream.on('error', () => undefined);
    if (stream.open.kind !== 'incoming') {
      stream.reset('unsupported stream kind');
      return;
    }
    const { port: remotePort, mode, connId } = stream.open;
    if (connId !== undefined && input.onConnection) {
      reportConnection(stream, { ...stream.open, connId }, input.onConnection, pod);
    }
    const mapping = input.ports.find((p) => p.remote === remotePort);
    if (!mapping) {
      stream.reset(`no local port for ${remotePort}`);
      return;
    }
    const { recorder } = input;
    if (mode === 'steal' && recorder) {
      recorder.take(stream, { port: remotePort, localPort: mapping.local, pod }).then(
        (taken) => {
          if (!taken) connectLocal(stream, host, mapping, mode, input.onError);
        },
        (err: unknown) => stream.reset(String(err)),
      );
      return;
    }
    // A filtered mirror's HTTP/2 copy needs the local command's answers back (flow control); the agent drops them.
    connectLocal(stream, host, mapping, stream.open.answers ? 'steal' : mode, input.onError);
  };
}

/**
 * The events the agent sends for a connection it hands over whole, made here from its stream: the bytes the client
 * sent are those the stream received, the bytes it got those the stream sent.
 */
function reportConnection(
  stream: MuxStream,
  open: { connId: string; port: number; remoteAddress: string; remotePort: number },
  report: NonNullable<IncomingHandlerInput['onConnection']>,
  pod: string | undefined,
): void {
  const event = {
    kind: 'connection',
    connId: open.connId,
    port: open.port,
    remoteAddress: open.remoteAddress,
    remotePort: open.remotePort,
    to: 'local',
  } as const;
  report({ ...event, phase: 'open', at: Date.now() }, pod);
  stream.once('close', () =>
    report(
      { ...event, phase: 'close', bytesIn: stream.bytesReceived, bytesOut: stream.bytesSent, at: Date.now() },
      pod,
    ),
  );
}

/** Connects a stream to the local command: both ways for steal, the client's bytes only for mirror. */
function connectLocal(
  stream: MuxStream,
  host: string,
  mapping: PortMapping,
  mode: 'steal' | 'mirror',
  onError: ((message: string) => void) | undefined,
): void {
  // Half-open, as the client's own connection is: the client's end reaches the local command, and its answer still
  // goes back after that.
  const socket: Socket = connectOwnReads({ host, port: mapping.local, allowHalfOpen: true });
  socket.setNoDelay(true);
  socket.on('error', (err: NodeJS.ErrnoException) => {
    onError?.(`local connection to ${host}:${mapping.local} failed: ${err.code ?? err.message}`);
    stream.reset(err.code ?? 'ECONNRESET');
  });
  stream.on('error', () => socket.destroy());
  if (mode === 'mirror') {
    // The pod answers the client; the local answer is read (so the local command is not blocked) and dropped.
    stream.deliverTo(socket);
    socket.on('end', () => stream.end());
    ownReads(socket)?.start(() => 'released');
  } else {
    spliceSocket(stream, socket);
  }
  socket.on('close', () => {
    if (!stream.writableEnded && !stream.destroyed) stream.end();
  });
}
