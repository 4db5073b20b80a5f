// The session's local outgoing proxy on 127.0.0.1:<random>: one port that speaks SOCKS5 (CONNECT, UDP ASSOCIATE), HTTP
// (CONNECT and absolute-URI requests) and the preload's control protocol, told apart by the first byte; every
// connection is dialled by the agent, every datagram sent from the pod.
// Each of the three asks for the session's secret first: a connection without it is refused and counted, not served.
import { createSocket } from 'node:dgram';
import { createServer, type Server, type Socket } from 'node:net';
import { CONTROL_FIRST_BYTE } from './control-protocol.js';
import { serveControl } from './control.js';
import { toDialError, type ClusterDialer } from './dialer.js';
import { acceptHttp, createHttpProxyServer, describeDialError, type ProxyDialEvent } from './http-connect.js';
import { PROXY_USERNAME, newProxySecret, type ProxyRefusal } from './proxy-auth.js';
import {
  SOCKS_VERSION,
  SocksAuthError,
  SocksProtocolError,
  SocksReply,
  encodeSocksReply,
  encodeSocksUdp,
  parseSocksUdp,
  readSocksConnect,
  socksReplyFor,
} from './socks5.js';
import { joinStreams } from './streams.js';
import { UdpRelays, type UdpAssociation } from './udp.js';

/** A client that connects and says nothing is dropped after this long (a proxy client always speaks first). */
const FIRST_BYTE_TIMEOUT_MS = 30_000;

export interface OutgoingProxyOptions {
  dialer: ClusterDialer;
  /** Loopback address to listen on (default 127.0.0.1). */
  host?: string;
  /** 0 (default) picks a free port. */
  port?: number;
  /** Called for every dial (success or failure), e.g. to log it. */
  onDial?: (event: ProxyDialEvent) => void;
  /** The session's secret (default: a new random one). */
  secret?: string;
  /** Called for every connection refused for want of the secret, with the count so far. */
  onRefused?: (refusal: ProxyRefusal & { count: number }) => void;
  /** Why UDP is not carried (an agent without the `udp` feature): UDP requests are refused with it. */
  udpRefusal?: string;
}

export interface OutgoingProxy {
  host: string;
  port: number;
  /** host:port, IPv6 in brackets. */
  address: string;
  /** What a client must present: SOCKS5 username/password, Proxy-Authorization Basic, the preload's hello token. */
  credentials: { username: string; secret: string };
  /** How many connections were refused for want of the secret. */
  refused(): number;
  /** Stops listening and destroys every connection the proxy holds. */
  close(): Promise<void>;
}

export async function startOutgoingProxy(options: OutgoingProxyOptions): Promise<OutgoingProxy> {
  const host = options.host ?? '127.0.0.1';
  const resources = new Set<Socket | Server>();
  const track = (resource: Socket | Server): (() => void) => {
    resources.add(resource);
    return () => resources.delete(resource);
  };
  const secret = options.secret ?? newProxySecret();
  let refusals = 0;
  const onRefused = (refusal: ProxyRefusal): void => {
    refusals += 1;
    options.onRefused?.({ ...refusal, count: refusals });
  };
  const openUdp = options.udpRefusal === undefined ? options.dialer.udp?.bind(options.dialer) : undefined;
  const udp = openUdp ? new UdpRelays(openUdp) : undefined;
  const udpRefusal = options.udpRefusal;
  const guarded = { dialer: options.dialer, onDial: options.onDial, secret, onRefused, udp, udpRefusal };
  const httpServer = createHttpProxyServer(guarded);

  const server = createServer({ allowHalfOpen: true }, (socket) => {
    const forget = track(socket);
    socket.once('close', forget);
    socket.on('error', () => socket.destroy());
    socket.setTimeout(FIRST_BYTE_TIMEOUT_MS, () => socket.destroy());
    socket.once('readable', () => {
      const first = socket.read(1) as Buffer | null;
      if (first === null) return; // ended before saying anything
      socket.setTimeout(0);
      socket.unshift(first);
      if (first[0] === SOCKS_VERSION) void serveSocks(socket, guarded);
      else if (first[0] === CONTROL_FIRST_BYTE) serveControl(socket, guarded, { track });
      else {
        // The HTTP side wants a half-closing client to be closed (Node's http server expects allowHalfOpen false).
        socket.allowHalfOpen = false;
        acceptHttp(httpServer, socket);
      }
    });
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const bound = server.address();
  if (!bound || typeof bound !== 'object') throw new Error('the outgoing proxy has no address');
  const port = bound.port;
  let closing: Promise<void> | undefined;
  return {
    host,
    port,
    address: host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`,
    credentials: { username: PROXY_USERNAME, secret },
    refused: () => refusals,
    close() {
      closing ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        httpServer.close();
        udp?.close();
        for (const resource of resources) {
          if ('destroy' in resource) resource.destroy();
          else resource.close();
        }
        resources.clear();
      });
      return closing;
    },
  };
}

interface GuardedOptions {
  dialer: ClusterDialer;
  onDial?: (event: ProxyDialEvent) => void;
  secret: string;
  onRefused: (refusal: ProxyRefusal) => void;
  udp?: UdpRelays;
  udpRefusal?: string;
}

async function serveSocks(socket: Socket, options: GuardedOptions): Promise<void> {
  let target: { host: string; port: number; udp?: true };
  try {
    target = await readSocksConnect(socket, options.secret);
  } catch (err) {
    if (err instanceof SocksAuthError) {
      options.onRefused({ via: 'socks5', reason: err.message });
      // Its answer (no acceptable method, or authentication failed) is written: end lets it reach the client.
      socket.end();
    } else if (err instanceof SocksProtocolError && err.reply !== undefined && socket.writable) {
      socket.end(encodeSocksReply(err.reply));
    } else {
      socket.destroy();
    }
    return;
  }
  if (target.udp) {
    serveSocksUdp(socket, target.port, options);
    return;
  }
  try {
    const remote = await options.dialer.connect(target.host, target.port);
    options.onDial?.({ via: 'socks5', ...target });
    if (socket.destroyed) {
      remote.destroy();
      return;
    }
    const details = remote as Partial<{ localAddress: string; localPort: number }>;
    const bound =
      details.localAddress && details.localPort
        ? { address: details.localAddress, port: details.localPort }
        : undefined;
    socket.write(encodeSocksReply(SocksReply.succeeded, bound));
    await joinStreams(socket, remote);
  } catch (err) {
    const dialError = toDialError(err, `connect ${target.host}:${target.port}`);
    options.onDial?.({
      via: 'socks5',
      ...target,
      error: { code: dialError.code, message: describeDialError(dialError, target.host, target.port) },
    });
    if (socket.writable) socket.end(encodeSocksReply(socksReplyFor(dialError.code)));
  }
}

/**
 * SOCKS5 UDP ASSOCIATE (RFC 1928 §7): a UDP port of the proxy's that takes the client's datagrams (from the TCP
 * client's address; from `clientPort`, or the first port that sends when it said 0) and sends them from the pod; the
 * replies come back with their source in the header. It lives as long as the TCP connection.
 */
function serveSocksUdp(socket: Socket, clientPort: number, options: GuardedOptions): void {
  const openUdp = options.udp ? options.dialer.udp?.bind(options.dialer) : undefined;
  if (!openUdp) {
    // devop said why when the session started (an agent without the `udp` feature).
    socket.end(encodeSocksReply(SocksReply.commandNotSupported));
    return;
  }
  const clientAddress = socket.remoteAddress ?? '127.0.0.1';
  const relay = createSocket(clientAddress.includes(':') ? 'udp6' : 'udp4');
  let sender = clientPort === 0 ? undefined : clientPort;
  let association: UdpAssociation | undefined;
  const associated = (): UdpAssociation => {
    if (association) return association;
    const opened = openUdp();
    association = opened;
    opened.on('close', () => {
      if (association === opened) association = undefined;
    });
    opened.on('datagram', (datagram) => {
      if (sender !== undefined)
        relay.send(encodeSocksUdp(datagram.host, datagram.port, datagram.payload), sender, clientAddress);
    });
    return opened;
  };
  relay.on('message', (message, from) => {
    if (from.address !== clientAddress) return;
    sender ??= from.port;
    if (from.port !== sender) return;
    const datagram = parseSocksUdp(message);
    if (datagram) associated().send(datagram);
  });
  relay.on('error', () => socket.destroy());
  socket.on('data', () => undefined); // nothing more is said on it; its close ends the association
  socket.once('close', () => {
    association?.close();
    relay.close();
  });
  relay.bind(0, socket.localAddress, () => {
    options.onDial?.({ via: 'socks5', host: 'udp', port: relay.address().port });
    if (socket.writable) socket.write(encodeSocksReply(SocksReply.succeeded, relay.address()));
  });
}
