// Server side of the preload's control endpoint: answers lookups with the cluster's DNS and turns a connect into an
// already-dialled cluster connection behind a one-shot loopback port, which the preload's own socket then connects to.
import { createServer, type Server, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { toDialError, type ClusterDialer } from './dialer.js';
import { parseControlRequest, type ControlAnswer, type ControlRequest } from './control-protocol.js';
import type { ProxyDialEvent } from './http-connect.js';
import { joinStreams } from './streams.js';

/**
 * How long a dialled connection waits for the preload to come and take it. The preload connects at once; this only
 * bounds what a crashed child leaves behind.
 */
export const ONE_SHOT_ACCEPT_MS = 15_000;
/** A control line longer than this is not a request the preload sends: the connection is dropped. */
const MAX_LINE = 8 * 1024;

export interface ControlResources {
  /** Registers a socket or listener so that closing the proxy closes it too; returns a function that forgets it. */
  track(resource: Socket | Server): () => void;
}

export interface ControlOptions {
  dialer: ClusterDialer;
  onDial?: (event: ProxyDialEvent) => void;
}

/** Serves one control connection until it ends. */
export function serveControl(socket: Socket, options: ControlOptions, resources: ControlResources): void {
  socket.setEncoding('utf8');
  let buffered = '';
  const answer = (reply: ControlAnswer): void => {
    if (!socket.destroyed) socket.write(`${JSON.stringify(reply)}\n`);
  };
  socket.on('data', (chunk: string) => {
    buffered += chunk;
    let newline = buffered.indexOf('\n');
    while (newline >= 0) {
      const line = buffered.slice(0, newline).trim();
      buffered = buffered.slice(newline + 1);
      if (line) {
        const request = parseControlRequest(line);
        if (!request) {
          socket.destroy();
          return;
        }
        void handleRequest(request, options, resources).then(answer);
      }
      newline = buffered.indexOf('\n');
    }
    if (buffered.length > MAX_LINE) socket.destroy();
  });
  socket.on('error', () => socket.destroy());
}

async function handleRequest(
  request: ControlRequest,
  options: ControlOptions,
  resources: ControlResources,
): Promise<ControlAnswer> {
  const { dialer, onDial } = options;
  if (request.op === 'lookup') {
    try {
      const addresses = await dialer.lookup(request.name, request.family);
      return { id: request.id, ok: true, addresses };
    } catch (err) {
      const dialError = toDialError(err, `lookup ${request.name}`);
      return { id: request.id, ok: false, code: dialError.code, message: dialError.message };
    }
  }
  let remote: Duplex;
  try {
    remote = await dialer.connect(request.host, request.port);
  } catch (err) {
    const dialError = toDialError(err, `connect ${request.host}:${request.port}`);
    onDial?.({
      via: 'preload',
      host: request.host,
      port: request.port,
      error: { code: dialError.code, message: dialError.message },
    });
    return { id: request.id, ok: false, code: dialError.code, message: dialError.message };
  }
  onDial?.({ via: 'preload', host: request.host, port: request.port });
  try {
    const port = await handOver(remote, resources);
    const details = remote as Partial<{ remoteAddress: string; remotePort: number }>;
    return { id: request.id, ok: true, port, remoteAddress: details.remoteAddress, remotePort: details.remotePort };
  } catch (err) {
    remote.destroy();
    const dialError = toDialError(err, 'listen on loopback');
    return { id: request.id, ok: false, code: dialError.code, message: dialError.message };
  }
}

/** Listens on a one-shot loopback port; the first connection to it is joined with `remote`. Resolves with the port. */
function handOver(remote: Duplex, resources: ControlResources): Promise<number> {
  return new Promise((resolve, reject) => {
    const listener = createServer({ allowHalfOpen: true });
    const forgetListener = resources.track(listener);
    // Until the preload connects, a close of the cluster side must not go unnoticed (and must not crash us).
    const onEarlyError = (): void => undefined;
    remote.on('error', onEarlyError);
    const timer = setTimeout(() => {
      listener.close();
      forgetListener();
      remote.destroy();
    }, ONE_SHOT_ACCEPT_MS);
    timer.unref();
    listener.once('connection', (local: Socket) => {
      clearTimeout(timer);
      listener.close();
      forgetListener();
      remote.off('error', onEarlyError);
      const forgetLocal = resources.track(local);
      void joinStreams(local, remote).then(forgetLocal);
    });
    listener.once('error', (err) => {
      clearTimeout(timer);
      forgetListener();
      reject(err);
    });
    listener.listen(0, '127.0.0.1', () => {
      const address = listener.address();
      if (address && typeof address === 'object') resolve(address.port);
    });
  });
}
