// The tunnel: one pods/portforward WebSocket (v4.channel.k8s.io) to one or more ports of a pod, each port exposed as a
// Duplex byte stream. Writes go straight to the WebSocket with backpressure; a port's error channel fails only that
// port's stream, and the WebSocket stays open until every port's stream is done.
import { Duplex } from 'node:stream';
import type { KubeConfig } from '@kubernetes/client-node';
// client-node's PortForward forwards one port only; its WebSocket connect (auth, TLS, proxy, timeout) serves several.
import { WebSocketHandler } from '@kubernetes/client-node/dist/web-socket-handler.js';
import type WebSocket from 'ws';
import { pool } from '../../shared/buffer-pool.js';
import { apiCall } from './errors.js';
import { ApiTimeoutError, isHandshakeTimeout, requestTimeoutOf } from './request-timeout.js';

/**
 * How much the WebSocket may buffer before writes wait: enough to keep a fast link busy, small enough to bound memory.
 */
const WS_HIGH_WATER_BYTES = 1024 * 1024;
/**
 * Gathered writes (_writev) are cut into messages of about this size: whoever unwraps a WebSocket message (API server,
 * kubelet) holds it whole first. A single write goes as one message.
 */
const MESSAGE_BYTES = WS_HIGH_WATER_BYTES;
/**
 * Messages of this size and up are copied into buffers of the process's pool (shared/buffer-pool.ts), given back once
 * written; smaller ones come from Node's own pool. With the writer's concatenation and a fresh buffer per message, the
 * CLI spent twice the CPU per byte through the tunnel, much of it faulting in fresh pages (benchmarks.md).
 */
const POOLED_MIN_BYTES = 16 * 1024;
/** Larger messages (a single write of more than 2 MiB) get a buffer of their own. */
const POOLED_MAX_BYTES = 2 * 1024 * 1024;

/** The pool's size class for a message of `size` bytes: the next power of two, so that bulk messages share buffers. */
function pooledSize(size: number): number {
  return 2 ** Math.ceil(Math.log2(size));
}
/** Port i has data channel 2i and error channel 2i+1; channel 255 means "close", so 127 ports at most. */
const MAX_PORTS = 127;
/** The first message on each channel starts with its port (uint16 little-endian), which is not stream data. */
const PORT_PREFIX_BYTES = 2;

export class PortForwardError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PortForwardError';
  }
}

/** The WebSocket the ports share; it is closed when the last port's stream is done with it. */
interface SharedSocket {
  ws?: WebSocket;
  release(port: PortStream, terminate: boolean): void;
}

class PortStream extends Duplex {
  constructor(
    private readonly socket: SharedSocket,
    private readonly dataChannel: number,
  ) {
    super();
  }

  override _read(): void {
    // Data is pushed as it arrives; the mux's credit-based flow control bounds what is in flight.
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    this.#send([chunk], chunk.length, cb);
  }

  /**
   * Corked writes (the mux corks each flush's frames) and writes queued behind a full WebSocket: gathered into one
   * message (one copy) instead of being concatenated by the writer and copied again here.
   */
  override _writev(chunks: Array<{ chunk: Buffer }>, cb: (err?: Error | null) => void): void {
    let group: Buffer[] = [];
    let bytes = 0;
    for (const { chunk } of chunks) {
      if (bytes > 0 && bytes + chunk.length > MESSAGE_BYTES) {
        // Only the last message's callback holds the writer back; a failed send destroys the stream anyway.
        this.#send(group, bytes, (err) => err && this.destroy(err));
        group = [];
        bytes = 0;
      }
      group.push(chunk);
      bytes += chunk.length;
    }
    this.#send(group, bytes, cb);
  }

  /** Sends `chunks` (`bytes` in all) as one message on this port's data channel; `cb` when the WebSocket takes more. */
  #send(chunks: Buffer[], bytes: number, cb: (err?: Error | null) => void): void {
    const ws = this.socket.ws;
    if (!ws || ws.readyState !== ws.OPEN) {
      cb(new PortForwardError('the port-forward connection is closed'));
      return;
    }
    const size = bytes + 1;
    const pooled = size >= POOLED_MIN_BYTES && size <= POOLED_MAX_BYTES ? pool.take(pooledSize(size)) : undefined;
    const message = pooled ? pooled.subarray(0, size) : Buffer.allocUnsafe(size);
    message[0] = this.dataChannel;
    let at = 1;
    for (const chunk of chunks) at += chunk.copy(message, at);
    // ws is done with the message once it has been written (or failed): only then can its buffer be taken again.
    const sent = (err?: Error | null): Error | null => {
      if (pooled) pool.give(pooled);
      return err ?? null;
    };
    if (ws.bufferedAmount < WS_HIGH_WATER_BYTES) {
      ws.send(message, (err) => {
        const failed = sent(err);
        if (failed) this.destroy(failed);
      });
      cb();
    } else {
      ws.send(message, (err) => cb(sent(err)));
    }
  }

  override _final(cb: (err?: Error | null) => void): void {
    this.socket.release(this, false);
    cb();
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    this.socket.release(this, true);
    cb(err);
  }
}

/**
 * Opens one port-forward WebSocket to `ports` of the pod (kubelet connects to 127.0.0.1:port inside the pod's netns)
 * and resolves with one stream per port, in order. A dial failure reported on a port's error channel destroys that
 * port's stream with a PortForwardError; the others carry on.
 */
export async function openPortForwards(
  kc: KubeConfig,
  input: { namespace: string; pod: string; ports: number[] },
): Promise<Duplex[]> {
  if (input.ports.length === 0 || input.ports.length > MAX_PORTS)
    throw new Error(`a port-forward takes 1 to ${MAX_PORTS} ports, not ${input.ports.length}`);
  const live = new Set<PortStream>();
  const socket: SharedSocket = {
    release(port, terminate) {
      if (!live.delete(port) || live.size > 0) return;
      if (terminate) socket.ws?.terminate();
      else socket.ws?.close();
    },
  };
  const streams = input.ports.map((_port, i) => new PortStream(socket, 2 * i));
  for (const stream of streams) live.add(stream);
  const prefixed = new Set(streams.flatMap((_stream, i) => [2 * i, 2 * i + 1]));
  const receive = (channel: number, message: Buffer): boolean => {
    const stream = streams[channel >> 1];
    // A channel beyond the ports asked for means the peer speaks another protocol: close, as PortForward does.
    if (!stream) return false;
    const data = prefixed.delete(channel) ? message.subarray(PORT_PREFIX_BYTES) : message;
    if (channel % 2 === 0) {
      if (!stream.destroyed) stream.push(data);
    } else {
      const text = data.toString('utf8').trim();
      // Not at once: the first messages can come with the upgrade's answer, before the caller holds the stream.
      if (text !== '') setImmediate(() => stream.destroy(new PortForwardError(text)));
    }
    return true;
  };
  const query = input.ports.map((port) => `ports=${port}`).join('&');
  const path = `/api/v1/namespaces/${input.namespace}/pods/${input.pod}/portforward?${query}`;
  const ctx = {
    action: `open a port-forward to pod ${input.pod}:${input.ports.join(',')}`,
    verb: 'create',
    resource: 'pods/portforward',
    namespace: input.namespace,
    name: input.pod,
  };
  const ws = (await apiCall(ctx, async () => {
    try {
      return await new WebSocketHandler(kc).connect(path, null, receive);
    } catch (err) {
      if (isHandshakeTimeout(err))
        throw new ApiTimeoutError(kc.getCurrentCluster()?.server ?? 'the API server', requestTimeoutOf(kc));
      // A refused upgrade comes as a ws ErrorEvent (not an Error) saying "Unexpected server response: 403": give it
      // the HTTP code, so that it is reported as what it is (forbidden, not found) instead of retried.
      const message = (err as { message?: unknown } | null)?.message;
      const text = typeof message === 'string' ? message : String(err);
      const status = /Unexpected server response: (\d+)/.exec(text);
      if (status) throw Object.assign(new Error(text), { code: Number(status[1]) });
      throw err instanceof Error ? err : new Error(text);
    }
  })) as unknown as WebSocket;
  socket.ws = ws;
  ws.on('close', () => {
    for (const stream of streams) {
      stream.push(null);
      if (!stream.destroyed) stream.destroy();
    }
  });
  ws.on('error', (err) => {
    for (const stream of streams) stream.destroy(err);
  });
  return streams;
}

/** Opens a port-forward to one `port` of the pod: openPortForwards with a single port. */
export async function openPortForward(
  kc: KubeConfig,
  input: { namespace: string; pod: string; port: number },
): Promise<Duplex> {
  const [stream] = await openPortForwards(kc, { namespace: input.namespace, pod: input.pod, ports: [input.port] });
  return stream;
}
