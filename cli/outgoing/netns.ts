// devop's side of `--outgoing-netns`: the Unix socket that the namespace's forwarder (cli/native/outgoing-netns.c,
// dist/devop-netns) hands each TCP connection and DNS lookup of the local command to. One request line per
// connection, the session's secret first; the outgoing rules decide as for the preloads: cluster destinations are
// dialled by the agent, local ones (loopback, this machine, excludes) from this machine.
//   SECRET connect HOST PORT  →  "OK\n" then the bytes both ways, or "ERR CODE MESSAGE\n"
//   SECRET lookup NAME        →  "OK ADDRESS ADDRESS…\n" (the name's addresses, both families), or "ERR CODE MESSAGE\n"
import { lookup as dnsLookup } from 'node:dns/promises';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { createServer, isIP, connect as netConnect, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Duplex } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { toDialError, type ClusterDialer, type ResolvedAddress } from './dialer.js';
import { parseOutgoingFilter, routeOf, ruleMatches } from './filters.js';
import type { ProxyDialEvent } from './http-connect.js';
import { secretMatches, type ProxyRefusal } from './proxy-auth.js';
import { joinStreams } from './streams.js';

/** The variables devop-netns reads: devop's socket, and the secret (which it takes out of the command's env). */
export const NETNS_SOCKET_ENV = 'DEVOP_NETNS_SOCKET';
export const NETNS_TOKEN_ENV = 'DEVOP_NETNS_TOKEN';
/** A request line longer than this is not one the forwarder sends. */
const MAX_LINE = 1024;
/** The forwarder writes its request as soon as it connects. */
const REQUEST_TIMEOUT_MS = 10_000;

/** dist/devop-netns (Linux only): next to the running bundle, or in dist/ of the checkout when run from source. */
export function netnsLauncherPath(): string | undefined {
  if (process.platform !== 'linux') return undefined;
  for (const relative of ['./devop-netns', '../../dist/devop-netns']) {
    const candidate = fileURLToPath(new URL(relative, import.meta.url));
    if (existsSync(candidate)) return candidate;
  }
  return undefined;
}

export interface NetnsBridgeOptions {
  dialer: ClusterDialer;
  secret: string;
  include: readonly string[];
  /** The excludes, the always-local ones included (this machine, the API server). */
  exclude: readonly string[];
  /** Destinations the rules keep local are dialled with this (default: a TCP connect from this machine). */
  connectLocally?: (host: string, port: number) => Promise<Duplex>;
  onDial?: (event: ProxyDialEvent) => void;
  onRefused?: (refusal: ProxyRefusal) => void;
}

export interface NetnsBridge {
  /** The Unix socket, 0600 in a 0700 directory of its own. */
  socketPath: string;
  /** The env the launcher needs. */
  env: Record<string, string>;
  close(): Promise<void>;
}

function connectFromHere(host: string, port: number): Promise<Duplex> {
  return new Promise((resolve, reject) => {
    const socket = netConnect({ host, port, allowHalfOpen: true });
    socket.once('connect', () => {
      socket.off('error', reject);
      resolve(socket);
    });
    socket.once('error', (err) => reject(toDialError(err, `connect ${host}:${port}`)));
  });
}

async function lookupHere(name: string): Promise<ResolvedAddress[]> {
  try {
    const found = await dnsLookup(name, { all: true });
    return found.map((entry) => ({ address: entry.address, family: entry.family as 4 | 6 }));
  } catch (err) {
    throw toDialError(err, `getaddrinfo ${name}`);
  }
}

/** One line of text for the forwarder: no newline inside. */
function errLine(err: unknown, what: string): string {
  const dialError = toDialError(err, what);
  return `ERR ${dialError.code} ${dialError.message.replace(/\s+/g, ' ')}\n`;
}

export async function startNetnsBridge(options: NetnsBridgeOptions): Promise<NetnsBridge> {
  const filter = parseOutgoingFilter({ include: options.include, exclude: options.exclude });
  const connectLocally = options.connectLocally ?? connectFromHere;
  /** Addresses the pod's DNS handed out: a connect to one goes through the cluster even when no include names it. */
  const clusterAddresses = new Set<string>();
  const sockets = new Set<Socket | Duplex>();
  const directory = await mkdtemp(join(tmpdir(), 'devop-netns-'));
  await chmod(directory, 0o700);
  const socketPath = join(directory, 'outgoing.sock');

  // As in the preloads: an exclude always wins; an address the pod's DNS handed out goes to the cluster.
  const route = (host: string, port?: number): 'cluster' | 'local' =>
    clusterAddresses.has(host) && !filter.exclude.some((rule) => ruleMatches(rule, host, port))
      ? 'cluster'
      : routeOf(filter, host, port);

  const serve = async (socket: Socket, line: string): Promise<void> => {
    const [token, op, ...rest] = line.split(' ');
    if (!secretMatches(token ?? '', options.secret)) {
      options.onRefused?.({ via: 'netns', reason: 'a request without the token' });
      socket.end('ERR EACCES the session token is missing\n');
      return;
    }
    if (op === 'lookup' && rest.length === 1 && rest[0]) {
      const name = rest[0];
      try {
        const addresses =
          route(name) === 'local' && !isIP(name) ? await lookupHere(name) : await options.dialer.lookup(name);
        if (route(name) === 'cluster') for (const entry of addresses) clusterAddresses.add(entry.address);
        socket.end(`OK ${addresses.map((entry) => entry.address).join(' ')}\n`);
      } catch (err) {
        socket.end(errLine(err, `lookup ${name}`));
      }
      return;
    }
    const port = Number(rest[1]);
    if (op !== 'connect' || rest.length !== 2 || !isIP(rest[0] ?? '') || !Number.isInteger(port) || port < 1) {
      socket.end('ERR EFAULT not a request of devop-netns\n');
      return;
    }
    const host = rest[0];
    const where = route(host, port);
    let remote: Duplex;
    try {
      remote = where === 'local' ? await connectLocally(host, port) : await options.dialer.connect(host, port);
    } catch (err) {
      const dialError = toDialError(err, `connect ${host}:${port}`);
      if (where === 'cluster')
        options.onDial?.({ via: 'netns', host, port, error: { code: dialError.code, message: dialError.message } });
      socket.end(errLine(dialError, `connect ${host}:${port}`));
      return;
    }
    if (where === 'cluster') options.onDial?.({ via: 'netns', host, port });
    if (socket.destroyed) {
      remote.destroy();
      return;
    }
    sockets.add(remote);
    socket.write('OK\n');
    await joinStreams(socket, remote);
    sockets.delete(remote);
  };

  const server: Server = createServer({ allowHalfOpen: true }, (socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    socket.on('error', () => socket.destroy());
    socket.setTimeout(REQUEST_TIMEOUT_MS, () => socket.destroy());
    let buffered = Buffer.alloc(0);
    const onData = (chunk: Buffer): void => {
      buffered = Buffer.concat([buffered, chunk]);
      const newline = buffered.indexOf(0x0a);
      if (newline < 0) {
        if (buffered.length > MAX_LINE) socket.destroy();
        return;
      }
      socket.off('data', onData);
      socket.pause();
      socket.setTimeout(0);
      const rest = buffered.subarray(newline + 1);
      if (rest.length > 0) socket.unshift(rest);
      void serve(socket, buffered.subarray(0, newline).toString('utf8').trim()).catch(() => socket.destroy());
    };
    socket.on('data', onData);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(socketPath, () => {
      server.off('error', reject);
      resolve();
    });
  });
  await chmod(socketPath, 0o600);
  let closing: Promise<void> | undefined;
  return {
    socketPath,
    env: { [NETNS_SOCKET_ENV]: socketPath, [NETNS_TOKEN_ENV]: options.secret },
    close() {
      closing ??= (async () => {
        await new Promise<void>((resolve) => {
          server.close(() => resolve());
          for (const socket of sockets) socket.destroy();
          sockets.clear();
        });
        await rm(directory, { recursive: true, force: true });
      })();
      return closing;
    },
  };
}
