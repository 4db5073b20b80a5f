// Server side of the preload's control endpoint: after a hello with the session's token, answers lookups with the
// cluster's DNS and turns a connect into an already-dialled cluster connection behind a one-shot loopback port, which
// the preload's own socket then connects to and claims (by its local port) over this authenticated connection.
import { createServer, type Server, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { toDialError, type ClusterDialer } from './dialer.js';
import { parseControlRequest, type ControlAnswer, type ControlRequest } from './control-protocol.js';
import type { ProxyDialEvent } from './http-connect.js';
import { secretMatches, type ProxyRefusal } from './proxy-auth.js';
import { joinStreams } from './streams.js';
import type { UdpRelays } from './udp.js';

/**
 * How long a dialled connection waits for the preload to come and take it. The preload connects at once; this only
 * bounds what a crashed child leaves behind.
 */
export const ONE_SHOT_ACCEPT_MS = 15_000;
/** A control line longer than this is not a request the preload sends: the connection is dropped. */
const MAX_LINE = 8 * 1024;
/**
 * Connections a one-shot port holds until the preload's claim names one (the preload's own, plus a few strangers that
 * raced it); more are refused at once.
 */
const MAX_UNCLAIMED = 4;
/** The preload writes its hello as soon as it connects: a connection that has not within this long is dropped. */
const HELLO_TIMEOUT_MS = 10_000;

export interface ControlResources {
  /** Registers a socket or listener so that closing the proxy closes it too; returns a function that forgets it. */
  track(resource: Socket | Server): () => void;
}

export interface ControlOptions {
  dialer: ClusterDialer;
  onDial?: (event: ProxyDialEvent) => void;
  /** The session's secret: the hello must carry it. */
  secret: string;
  /** Called for every connection refused for want of it. */
  onRefused?: (refusal: ProxyRefusal) => void;
  /** The relays of `udp` requests; absent when UDP is not carried (then `udpRefusal` says why). */
  udp?: UdpRelays;
  udpRefusal?: string;
}

/** A dialled connection waiting on its one-shot port for the preload's socket. */
interface Handover {
  port: number;
  claim(from: number): void;
}

/** Serves one control connection until it ends. */
export function serveControl(socket: Socket, options: ControlOptions, resources: ControlResources): void {
  socket.setEncoding('utf8');
  let buffered = '';
  let authenticated = false;
  /** This connection's dialled connections by one-shot port: only this (authenticated) connection may claim them. */
  const handovers = new Map<number, Handover>();
  const answer = (reply: ControlAnswer): void => {
    if (!socket.destroyed) socket.write(`${JSON.stringify(reply)}\n`);
  };
  const refuse = (request: ControlRequest): void => {
    options.onRefused?.({ via: 'control', reason: request.op === 'hello' ? 'wrong token' : 'no hello with the token' });
    answer({
      id: request.id,
      ok: false,
      code: 'EACCES',
      message: "devop's outgoing proxy takes the session's token only (the preload reads it from DEVOP_PRELOAD_CONFIG)",
    });
    socket.end();
  };
  socket.setTimeout(HELLO_TIMEOUT_MS, () => {
    options.onRefused?.({ via: 'control', reason: 'no hello' });
    socket.destroy();
  });
  socket.on('data', (chunk: string) => {
    buffered += chunk;
    let newline = buffered.indexOf('\n');
    while (newline >= 0) {
      const line = buffered.slice(0, newline).trim();
      buffered = buffered.slice(newline + 1);
      if (line) {
        const request = parseControlRequest(line);
        if (!request) {
          if (!authenticated) options.onRefused?.({ via: 'control', reason: 'not a control request' });
          socket.destroy();
          return;
        }
        if (!authenticated) {
          if (request.op !== 'hello' || !secretMatches(request.token, options.secret)) {
            refuse(request);
            buffered = '';
            socket.pause();
            return;
          }
          authenticated = true;
          socket.setTimeout(0);
        } else if (request.op === 'claim') {
          handovers.get(request.port)?.claim(request.from);
          handovers.delete(request.port);
        } else if (request.op !== 'hello') {
          void handleRequest(request, options, resources, handovers).then(answer);
        }
      }
      newline = buffered.indexOf('\n');
    }
    if (buffered.length > MAX_LINE) {
      if (!authenticated) options.onRefused?.({ via: 'control', reason: 'a line too long for a hello' });
      socket.destroy();
    }
  });
  socket.on('error', () => socket.destroy());
}

async function handleRequest(
  request: Extract<ControlRequest, { op: 'lookup' | 'connect' | 'udp' }>,
  options: ControlOptions,
  resources: ControlResources,
  handovers: Map<number, Handover>,
): Promise<ControlAnswer> {
  const { dialer, onDial } = options;
  if (request.op === 'udp') {
    if (!options.udp) {
      const message = options.udpRefusal ?? 'UDP is not carried through the cluster in this session';
      return { id: request.id, ok: false, code: 'ENOTSUP', message };
    }
    try {
      return { id: request.id, ok: true, port: await options.udp.relay(request.from, request.host, request.port) };
    } catch (err) {
      const code = (err as { code?: string }).code ?? 'EFAULT';
      return { id: request.id, ok: false, code, message: (err as Error).message };
    }
  }
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
    const handover = await handOver(remote, resources, options.onRefused, (port) => handovers.delete(port));
    handovers.set(handover.port, handover);
    const port = handover.port;
    const details = remote as Partial<{ remoteAddress: string; remotePort: number }>;
    return { id: request.id, ok: true, port, remoteAddress: details.remoteAddress, remotePort: details.remotePort };
  } catch (err) {
    remote.destroy();
    const dialError = toDialError(err, 'listen on loopback');
    return { id: request.id, ok: false, code: dialError.code, message: dialError.message };
  }
}

/**
 * Listens on a one-shot loopback port and joins `remote` with the connection the preload claims (by the local port its
 * socket connected from); any other connection to the port is refused. Resolves once listening.
 */
function handOver(
  remote: Duplex,
  resources: ControlResources,
  onRefused: ((refusal: ProxyRefusal) => void) | undefined,
  onDone: (port: number) => void,
): Promise<Handover> {
  return new Promise((resolve, reject) => {
    const listener = createServer({ allowHalfOpen: true, pauseOnConnect: true });
    const forgetListener = resources.track(listener);
    /** Connections not claimed yet, by their source port. */
    const waiting = new Map<number, Socket>();
    let claimed: number | undefined;
    let joined = false;
    // Until the preload connects, a close of the cluster side must not go unnoticed (and must not crash us).
    const onEarlyError = (): void => undefined;
    remote.on('error', onEarlyError);
    const stranger = (socket: Socket): void => {
      onRefused?.({ via: 'handover', reason: 'a connection the preload did not claim' });
      socket.destroy();
    };
    let port = 0;
    const finish = (): void => {
      clearTimeout(timer);
      listener.close();
      forgetListener();
      onDone(port);
      for (const socket of waiting.values()) stranger(socket);
      waiting.clear();
    };
    const join = (local: Socket): void => {
      joined = true;
      waiting.delete(local.remotePort ?? 0);
      finish();
      remote.off('error', onEarlyError);
      const forgetLocal = resources.track(local);
      local.resume();
      void joinStreams(local, remote).then(forgetLocal);
    };
    const timer = setTimeout(() => {
      finish();
      if (!joined) remote.destroy();
    }, ONE_SHOT_ACCEPT_MS);
    timer.unref();
    listener.on('connection', (local: Socket) => {
      local.on('error', () => local.destroy());
      if (joined) return stranger(local);
      if (claimed !== undefined) return local.remotePort === claimed ? join(local) : stranger(local);
      if (waiting.size >= MAX_UNCLAIMED || local.remotePort === undefined) return stranger(local);
      waiting.set(local.remotePort, local);
      local.once('close', () => waiting.delete(local.remotePort ?? 0));
    });
    listener.once('error', (err) => {
      clearTimeout(timer);
      forgetListener();
      reject(err);
    });
    listener.listen(0, '127.0.0.1', () => {
      const address = listener.address();
      if (!address || typeof address !== 'object') return;
      port = address.port;
      resolve({
        port,
        claim(from) {
          if (joined || claimed !== undefined) return;
          claimed = from;
          const mine = waiting.get(from);
          for (const [port, socket] of waiting) if (port !== from) stranger(socket);
          waiting.clear();
          if (mine) join(mine);
        },
      });
    });
  });
}
