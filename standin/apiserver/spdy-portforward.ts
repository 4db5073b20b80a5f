// pods/portforward over SPDY, as the kubelet serves it (kubernetes pkg/kubelet/cri/streaming/portforward/
// httpstream.go): each forwarded connection is a pair of client-opened streams (headers streamtype error|data, port,
// requestid); the data stream's bytes go to the pod's port and back, the error stream carries a failure message.
// kubectl up to 1.30 speaks it over a plain SPDY/3.1 upgrade, kubectl 1.31+ inside a WebSocket (subprotocol
// SPDY/3.1+portforward.k8s.io): the frames are the same (spdy.ts).
import type { Duplex } from 'node:stream';
import type { K8sObject } from './errors.js';
import { type SpdyTransport, spdySession } from './spdy.js';

export const SPDY_TUNNEL_PROTOCOL = 'SPDY/3.1+portforward.k8s.io';
/** Stop reading from the pod while this much is queued towards the client (bounded memory per connection). */
const HIGH_WATER = 1024 * 1024;

interface ForwardedConnection {
  port: number;
  errorStream?: number;
  dataStream?: number;
  socket?: Duplex;
  /** Bytes (and the end) the client sent before the pod connection was open. */
  pending: Buffer[];
  ended: boolean;
}

export type DialPod = (port: number) => Promise<Duplex>;

/** Serves one SPDY port-forward connection; the caller passes the transport's bytes to `receive` and calls `close`. */
export function serveSpdyPortForward(
  transport: SpdyTransport,
  pod: K8sObject,
  dial: DialPod | undefined,
): { receive(chunk: Buffer): void; close(): void } {
  const connections = new Map<string, ForwardedConnection>();
  const byStream = new Map<number, ForwardedConnection>();
  const close = (): void => {
    for (const conn of connections.values()) conn.socket?.destroy();
    session.close();
  };

  const session = spdySession(transport, {
    stream(id, headers) {
      const requestId = headers.get('requestid') ?? String(id);
      const conn = connections.get(requestId) ?? { port: Number(headers.get('port')), pending: [], ended: false };
      connections.set(requestId, conn);
      byStream.set(id, conn);
      const type = headers.get('streamtype');
      if (type === 'error') conn.errorStream = id;
      else if (type === 'data') {
        conn.dataStream = id;
        if (!(conn.port > 0 && conn.port < 65536)) return fail(conn, `invalid port ${headers.get('port')}`);
        void open(conn, id);
      }
    },
    data(id, payload, fin) {
      const conn = byStream.get(id);
      if (!conn || conn.dataStream !== id) return; // the error stream's half-close, or gone
      if (payload.length > 0) {
        if (conn.socket) conn.socket.write(payload);
        else conn.pending.push(Buffer.from(payload));
      }
      if (fin) {
        conn.ended = true;
        conn.socket?.end();
      }
    },
    reset(id) {
      byStream.get(id)?.socket?.destroy();
    },
    closed() {
      close();
      transport.end();
    },
  });

  const fail = (conn: ForwardedConnection, message: string): void => {
    const text = `error forwarding port ${conn.port} to pod ${pod.metadata.name}, uid ${pod.metadata.uid}: ${message}`;
    if (conn.errorStream !== undefined) session.send(conn.errorStream, Buffer.from(text), true);
    if (conn.dataStream !== undefined) session.send(conn.dataStream, Buffer.alloc(0), true);
  };

  const open = async (conn: ForwardedConnection, streamId: number): Promise<void> => {
    if (!dial) return fail(conn, 'no node runs this pod');
    let socket: Duplex;
    try {
      socket = await dial(conn.port);
    } catch (err) {
      return fail(conn, (err as Error).message);
    }
    if (!transport.isOpen()) return void socket.destroy();
    conn.socket = socket;
    for (const chunk of conn.pending.splice(0)) socket.write(chunk);
    if (conn.ended) socket.end();
    let queued = 0;
    socket.on('data', (chunk: Buffer) => {
      queued += chunk.length;
      session.send(streamId, chunk, false, () => {
        queued -= chunk.length;
        if (queued < HIGH_WATER && socket.isPaused()) socket.resume();
      });
      if (queued >= HIGH_WATER) socket.pause();
    });
    socket.on('end', () => {
      session.send(streamId, Buffer.alloc(0), true);
      if (conn.errorStream !== undefined) session.send(conn.errorStream, Buffer.alloc(0), true);
    });
    socket.on('error', (err) => fail(conn, err.message));
  };

  return { receive: (chunk) => session.receive(chunk), close };
}
