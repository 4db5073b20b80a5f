// The tunnel: a pods/portforward WebSocket (client-node PortForward) to one port of a pod, exposed as a Duplex byte
// stream. Writes go straight to the WebSocket with backpressure; the port-forward error channel fails the stream.
import { Duplex, PassThrough, Writable } from 'node:stream';
import { PortForward, type KubeConfig } from '@kubernetes/client-node';
import type WebSocket from 'ws';
import { apiCall } from './errors.js';
import { ApiTimeoutError, isHandshakeTimeout, requestTimeoutOf } from './request-timeout.js';

/**
 * How much the WebSocket may buffer before writes wait: enough to keep a fast link busy, small enough to bound memory.
 */
const WS_HIGH_WATER_BYTES = 1024 * 1024;
/** Port-forward data channel (the error channel is 1). */
const DATA_CHANNEL = 0;

export class PortForwardError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PortForwardError';
  }
}

class TunnelStream extends Duplex {
  private ws: WebSocket | undefined;

  attach(ws: WebSocket): void {
    this.ws = ws;
    ws.on('close', () => {
      this.push(null);
      if (!this.destroyed) this.destroy();
    });
    ws.on('error', (err) => this.destroy(err));
  }

  override _read(): void {
    // Data is pushed as it arrives; the mux's credit-based flow control bounds what is in flight.
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    const ws = this.ws;
    if (!ws || ws.readyState !== ws.OPEN) {
      cb(new PortForwardError('the port-forward connection is closed'));
      return;
    }
    const frame = Buffer.allocUnsafe(chunk.length + 1);
    frame[0] = DATA_CHANNEL;
    chunk.copy(frame, 1);
    if (ws.bufferedAmount < WS_HIGH_WATER_BYTES) {
      ws.send(frame, (err) => err && this.destroy(err));
      cb();
    } else {
      ws.send(frame, (err) => cb(err ?? null));
    }
  }

  override _final(cb: (err?: Error | null) => void): void {
    this.ws?.close();
    cb();
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    const ws = this.ws;
    if (ws && ws.readyState !== ws.CLOSED) ws.terminate();
    cb(err);
  }
}

/**
 * Opens a port-forward to `port` of the pod (kubelet connects to 127.0.0.1:port inside the pod's netns).
 * A dial failure reported on the error channel destroys the stream with a PortForwardError.
 */
export async function openPortForward(
  kc: KubeConfig,
  input: { namespace: string; pod: string; port: number },
): Promise<Duplex> {
  const stream = new TunnelStream();
  const output = new Writable({
    write(chunk: Buffer, _enc, cb) {
      stream.push(chunk);
      cb();
    },
  });
  let errorText = '';
  const errors = new Writable({
    write(chunk: Buffer, _enc, cb) {
      // The error channel opens with the port number (stripped by PortForward): an empty chunk is not an error.
      errorText += chunk.toString('utf8');
      if (errorText.trim() !== '') stream.destroy(new PortForwardError(errorText.trim()));
      cb();
    },
  });
  // PortForward reads stdin-style input; we write to the WebSocket ourselves, so this input never carries data.
  const idleInput = new PassThrough();
  const forward = new PortForward(kc, true);
  const ctx = {
    action: `open a port-forward to pod ${input.pod}:${input.port}`,
    verb: 'create',
    resource: 'pods/portforward',
    namespace: input.namespace,
    name: input.pod,
  };
  const ws = (await apiCall(ctx, async () => {
    try {
      return await forward.portForward(input.namespace, input.pod, [input.port], output, errors, idleInput);
    } catch (err) {
      if (isHandshakeTimeout(err))
        throw new ApiTimeoutError(kc.getCurrentCluster()?.server ?? 'the API server', requestTimeoutOf(kc));
      // The ws library reports a refused upgrade as "Unexpected server response: 403": give it the HTTP code.
      const status = /Unexpected server response: (\d+)/.exec(err instanceof Error ? err.message : '');
      throw status ? Object.assign(new Error((err as Error).message), { code: Number(status[1]) }) : err;
    }
  })) as unknown as WebSocket;
  stream.attach(ws);
  stream.on('close', () => idleInput.destroy());
  return stream;
}
