// The local command's UDP: associations (a `udp` stream to the agent, or a local socket in unit tests) and the
// loopback relays the LD_PRELOAD shim sends a UDP socket's datagrams to, one per (program socket, destination).
import { createSocket, type Socket } from 'node:dgram';
import { EventEmitter } from 'node:events';
import { isIP } from 'node:net';
import type { MuxStream } from '../../shared/mux.js';
import { DatagramDecoder, encodeDatagram, type Datagram } from '../../shared/udp-datagrams.js';
import type { SessionTunnel } from '../session/tunnel.js';

/** One UDP association through the cluster: datagrams out to any destination, replies back with their source. */
export interface UdpAssociation {
  /** Sends one datagram (host '' = the pod's nameserver); false when it was dropped (backlog full, closed). */
  send(datagram: Datagram): boolean;
  on(event: 'datagram', listener: (datagram: Datagram) => void): this;
  on(event: 'close', listener: () => void): this;
  close(): void;
}

/** Datagrams waiting for the tunnel up to this; more are dropped, as a full socket buffer drops them. */
const MAX_UNSENT_BYTES = 256 * 1024;

/** An association over a `udp` stream of the session's tunnel (the agent's socket in the pod's netns). */
export function muxUdpAssociation(tunnel: Pick<SessionTunnel, 'openStream'>): UdpAssociation {
  const stream: MuxStream = tunnel.openStream({ kind: 'udp' });
  const events = new EventEmitter();
  const decoder = new DatagramDecoder();
  let closed = false;
  const finish = (): void => {
    if (closed) return;
    closed = true;
    events.emit('close');
  };
  stream.on('data', (chunk: Buffer) => {
    let datagrams: Datagram[];
    try {
      datagrams = decoder.push(chunk);
    } catch (err) {
      stream.destroy(err as Error);
      return;
    }
    for (const datagram of datagrams) events.emit('datagram', datagram);
  });
  // The agent ends an idle association; the caller opens a new one for its next datagram.
  stream.on('end', () => {
    finish();
    stream.end();
  });
  stream.on('error', finish);
  stream.on('close', finish);
  return {
    send(datagram) {
      const bytes = encodeDatagram(datagram);
      if (!bytes || closed || stream.writableLength > MAX_UNSENT_BYTES) return false;
      stream.write(bytes);
      return true;
    },
    on(event: 'datagram' | 'close', listener: (...args: never[]) => void) {
      events.on(event, listener as (...args: unknown[]) => void);
      return this;
    },
    close() {
      finish();
      if (!stream.destroyed) stream.destroy();
    },
  };
}

/**
 * An association from this machine (the local dialer of unit tests): names come from `resolve`, the nameserver is
 * `nameserver` (host:port).
 */
export function localUdpAssociation(
  resolve: (name: string) => Promise<string>,
  nameserver?: { host: string; port: number },
): UdpAssociation {
  const socket = createSocket('udp4');
  const listeners = { datagram: [] as ((d: Datagram) => void)[], close: [] as (() => void)[] };
  let closed = false;
  socket.on('message', (payload, rinfo) => {
    const fromNameserver = nameserver && rinfo.address === nameserver.host && rinfo.port === nameserver.port;
    const datagram = fromNameserver
      ? { host: '', port: 53, payload }
      : { host: rinfo.address, port: rinfo.port, payload };
    for (const listener of listeners.datagram) listener(datagram);
  });
  socket.on('error', () => undefined);
  socket.on('close', () => {
    closed = true;
    for (const listener of listeners.close) listener();
  });
  return {
    send(datagram) {
      if (closed) return false;
      const to =
        datagram.host === ''
          ? Promise.resolve(nameserver ? { host: nameserver.host, port: nameserver.port } : undefined)
          : (isIP(datagram.host) ? Promise.resolve(datagram.host) : resolve(datagram.host)).then((host) => ({
              host,
              port: datagram.port,
            }));
      to.then(
        (dest) => {
          if (dest && !closed) socket.send(datagram.payload, dest.port, dest.host);
        },
        () => undefined,
      );
      return true;
    },
    on(event: 'datagram' | 'close', listener: (...args: never[]) => void) {
      (listeners[event] as unknown[]).push(listener);
      return this;
    },
    close() {
      if (!closed) socket.close();
    },
  };
}

/** A loopback relay unused (no datagram either way) for this long closes; the shim then asks for a new one. */
export const RELAY_IDLE_MS = 5 * 60_000;
/** Relays one proxy holds at most: a program that opens more UDP destinations gets EMFILE for the next. */
export const MAX_RELAYS = 1024;

interface Relay {
  port: number;
  socket: Socket;
  idle: NodeJS.Timeout;
  association?: UdpAssociation;
}

/**
 * The shim's relays: a loopback UDP socket per (program socket's local port, destination), connected to the program's
 * socket (so the kernel drops anyone else's datagrams). Each has an association of its own (a socket in the pod), so
 * every reply it gets is for that program socket, whatever its source; it is opened on demand, and again after the
 * agent ended an idle one.
 */
export class UdpRelays {
  private readonly relays = new Map<string, Relay>();

  constructor(private readonly open: () => UdpAssociation) {}

  /** The loopback port that carries the datagrams of local port `from` to host:port (host '' = the pod's DNS). */
  async relay(from: number, host: string, port: number): Promise<number> {
    const key = `${from} ${host} ${port}`;
    const existing = this.relays.get(key);
    if (existing) {
      existing.idle.refresh();
      return existing.port;
    }
    if (this.relays.size >= MAX_RELAYS) {
      throw Object.assign(new Error(`more than ${MAX_RELAYS} UDP destinations at once`), { code: 'EMFILE' });
    }
    const socket = createSocket('udp4');
    await new Promise<void>((resolve, reject) => {
      socket.once('error', reject);
      socket.bind(0, '127.0.0.1', () => socket.connect(from, '127.0.0.1', () => resolve()));
    });
    const relay: Relay = {
      port: socket.address().port,
      socket,
      idle: setTimeout(() => this.drop(key, relay), RELAY_IDLE_MS).unref(),
    };
    this.relays.set(key, relay);
    socket.removeAllListeners('error');
    // The program's socket is gone (the kernel refuses the relay's sends to it): the relay goes too.
    socket.on('error', () => this.drop(key, relay));
    socket.on('message', (payload) => {
      relay.idle.refresh();
      this.associated(relay).send({ host, port, payload });
    });
    return relay.port;
  }

  /** How many relays are open. */
  get size(): number {
    return this.relays.size;
  }

  close(): void {
    for (const [key, relay] of this.relays) this.drop(key, relay);
  }

  private associated(relay: Relay): UdpAssociation {
    if (relay.association) return relay.association;
    const association = this.open();
    relay.association = association;
    association.on('close', () => {
      if (relay.association === association) relay.association = undefined;
    });
    association.on('datagram', (datagram) => {
      relay.idle.refresh();
      relay.socket.send(datagram.payload);
    });
    return association;
  }

  private drop(key: string, relay: Relay): void {
    if (this.relays.get(key) !== relay) return;
    clearTimeout(relay.idle);
    this.relays.delete(key);
    relay.association?.close();
    relay.socket.close();
  }
}
