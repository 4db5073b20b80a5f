// The Node preload's hooks: Socket#connect (under net.connect, tls.connect, http, https, fetch/undici, pg…) and
// dns.lookup / dns.promises.lookup route cluster-bound destinations through devop's local proxy; the rest stays local.
import dns from 'node:dns';
import net from 'node:net';
import { syncBuiltinESMExports } from 'node:module';
import { constants as osConstants } from 'node:os';
import type { ControlAnswer } from '../outgoing/control-protocol.js';
import { PRELOAD_CONFIG_ENV, type PreloadConfig } from '../outgoing/control-protocol.js';
import { parseOutgoingFilter, routeOf, ruleMatches, type OutgoingFilter } from '../outgoing/filters.js';
import { createControlClient, type ControlClient } from './control-client.js';

/** Default deadline for an answer from the proxy (it answers as fast as the agent does; this only bounds a wedge). */
export const DEFAULT_CONTROL_TIMEOUT_MS = 20_000;
/** How many cluster-resolved addresses are remembered (so that connecting to them later goes through the cluster). */
const MAX_REMEMBERED_ADDRESSES = 4096;
/** libuv's getaddrinfo error numbers, as Node reports them. */
const UV_EAI = { ENOTFOUND: -3008, EAI_AGAIN: -3001 } as const;

const INSTALLED = Symbol.for('devop.preload.installed');

export function readPreloadConfig(env: NodeJS.ProcessEnv): PreloadConfig | undefined {
  const raw = env[PRELOAD_CONFIG_ENV];
  if (!raw) return undefined;
  try {
    const config = JSON.parse(raw) as PreloadConfig;
    if (!config.proxy || typeof config.proxy.port !== 'number' || typeof config.token !== 'string') return undefined;
    return config;
  } catch {
    return undefined;
  }
}

type ConnectFn = (this: net.Socket, ...args: unknown[]) => net.Socket;
type LookupCallback = (err: NodeJS.ErrnoException | null, address?: unknown, family?: number) => void;

interface ConnectOptions {
  host?: string;
  port?: number | string;
  path?: string;
  [key: string]: unknown;
}

/** Decides where a destination goes; remembers the addresses that cluster DNS gave out. */
export interface OutgoingRouter {
  route(host: string, port?: number): 'cluster' | 'local';
  remember(addresses: readonly string[]): void;
}

export function createRouter(filter: OutgoingFilter, proxy: { host: string; port: number }): OutgoingRouter {
  const clusterAddresses = new Set<string>();
  return {
    route(host, port) {
      const name = host.toLowerCase();
      // The proxy itself is always dialled directly, whatever the rules say.
      if (name === proxy.host && port === proxy.port) return 'local';
      if (filter.exclude.some((rule) => ruleMatches(rule, name, port))) return 'local';
      // An address that the cluster's DNS handed out is a cluster address, even if no include rule names it.
      if (clusterAddresses.has(name)) return 'cluster';
      return routeOf(filter, name, port);
    },
    remember(addresses) {
      for (const address of addresses) {
        if (clusterAddresses.size >= MAX_REMEMBERED_ADDRESSES) clusterAddresses.clear();
        clusterAddresses.add(address.toLowerCase());
      }
    },
  };
}

function errnoError(
  code: string,
  syscall: string,
  host: string,
  port?: number,
  detail?: string,
): NodeJS.ErrnoException {
  const target = port === undefined ? host : `${host}:${port}`;
  const err = new Error(`${syscall} ${code} ${target}${detail ? ` (${detail})` : ''}`) as NodeJS.ErrnoException & {
    hostname?: string;
    address?: string;
    port?: number;
  };
  err.code = code;
  err.syscall = syscall;
  const uv = (UV_EAI as Record<string, number>)[code];
  const errno = (osConstants.errno as Record<string, number>)[code];
  err.errno = uv ?? (errno === undefined ? undefined : -errno);
  if (syscall === 'getaddrinfo') err.hostname = host;
  else {
    err.address = host;
    if (port !== undefined) err.port = port;
  }
  return err;
}

/** The Node error a failed dial gives the program: name errors look like getaddrinfo's, the rest like connect's. */
export function dialFailure(code: string, host: string, port: number, detail?: string): NodeJS.ErrnoException {
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return errnoError(code, 'getaddrinfo', host);
  // Known errnos read like Node's own ("connect ECONNREFUSED host:port"); anything else keeps devop's detail.
  return errnoError(code, 'connect', host, port, code === 'EFAULT' ? detail : undefined);
}

/**
 * A routed socket is really connected to a loopback port of devop; its peer, for the program, is what the agent
 * connected to in the pod (a service IP and port), as it would be if the program ran there.
 */
function showPodPeer(socket: net.Socket, address: string, port: number): void {
  const family = net.isIP(address) === 6 ? 'IPv6' : 'IPv4';
  Object.defineProperty(socket, 'remoteAddress', { configurable: true, get: () => address });
  Object.defineProperty(socket, 'remotePort', { configurable: true, get: () => port });
  Object.defineProperty(socket, 'remoteFamily', { configurable: true, get: () => family });
}

function normalizeConnectArgs(args: unknown[]): [ConnectOptions, ((...a: unknown[]) => void) | null] {
  // net.connect passes Socket#connect an already normalized [options, cb] array.
  if (Array.isArray(args[0])) return args[0] as [ConnectOptions, ((...a: unknown[]) => void) | null];
  const internal = (net as unknown as { _normalizeArgs?: (a: unknown[]) => [ConnectOptions, unknown] })._normalizeArgs;
  if (internal) {
    const [options, cb] = internal(args);
    return [options, typeof cb === 'function' ? (cb as (...a: unknown[]) => void) : null];
  }
  const last = args[args.length - 1];
  const cb = typeof last === 'function' ? (last as (...a: unknown[]) => void) : null;
  if (typeof args[0] === 'object' && args[0] !== null) return [args[0] as ConnectOptions, cb];
  if (typeof args[0] === 'string' && Number.isNaN(Number(args[0]))) return [{ path: args[0] }, cb];
  return [{ port: args[0] as number, host: typeof args[1] === 'string' ? args[1] : undefined }, cb];
}

export interface InstalledHooks {
  router: OutgoingRouter;
  control: ControlClient;
}

/** Patches net and dns once per process (a second call, e.g. from a worker's re-import, returns the first install). */
export function installOutgoingHooks(config: PreloadConfig): InstalledHooks {
  const holder = globalThis as unknown as Record<symbol, InstalledHooks | undefined>;
  const existing = holder[INSTALLED];
  if (existing) return existing;

  const filter = parseOutgoingFilter({ include: config.include, exclude: config.exclude });
  const router = createRouter(filter, config.proxy);
  const originalConnect = net.Socket.prototype.connect as unknown as ConnectFn;
  const control = createControlClient({
    host: config.proxy.host,
    port: config.proxy.port,
    timeoutMs: config.timeoutMs ?? DEFAULT_CONTROL_TIMEOUT_MS,
    token: config.token,
    connectRaw: (socket, port, host) => void originalConnect.call(socket, { port, host }),
  });

  const hookedConnect: ConnectFn = function (this: net.Socket, ...args: unknown[]) {
    const [options, cb] = normalizeConnectArgs(args);
    const host = typeof options.host === 'string' && options.host ? options.host : 'localhost';
    const port = Number(options.port);
    if (options.path || !Number.isInteger(port) || port < 1 || port > 65535 || router.route(host, port) === 'local') {
      return originalConnect.apply(this, args);
    }
    if (cb) this.once('connect', cb);
    // Until the proxy has dialled, the socket is "connecting": writes queue, as they do during a DNS lookup.
    (this as { connecting: boolean }).connecting = true;
    control.request({ op: 'connect', host, port }).then(
      (answer: ControlAnswer) => {
        if (!answer.ok) {
          if (!this.destroyed) this.destroy(dialFailure(answer.code, host, port, answer.message));
          return;
        }
        if (!('port' in answer)) {
          this.destroy(dialFailure('EFAULT', host, port, 'unexpected answer from devop'));
          return;
        }
        // The one-shot port is on loopback, where anyone could connect: the proxy joins the dialled connection only
        // with the socket this process claims, named by the local port it connected from.
        const claim = (socket: net.Socket) => () =>
          control.tell({ op: 'claim', port: answer.port, from: socket.localPort ?? 0 });
        if (this.destroyed) {
          // Take the dialled connection and drop it at once, so the proxy frees it now rather than at its deadline.
          const drop = new net.Socket();
          drop.on('error', () => undefined);
          originalConnect.call(drop, { port: answer.port, host: config.proxy.host }, () => {
            claim(drop)();
            drop.destroy();
          });
          return;
        }
        if (answer.remoteAddress) showPodPeer(this, answer.remoteAddress, answer.remotePort ?? port);
        this.once('connect', claim(this));
        originalConnect.call(this, { port: answer.port, host: config.proxy.host });
      },
      (err: Error & { code?: string }) => {
        if (!this.destroyed) this.destroy(dialFailure(err.code ?? 'ECONNREFUSED', host, port, err.message));
      },
    );
    return this;
  };
  net.Socket.prototype.connect = hookedConnect as unknown as typeof net.Socket.prototype.connect;

  const clusterLookup = async (hostname: string, family: number): Promise<{ address: string; family: number }[]> => {
    const answer = await control.request({
      op: 'lookup',
      name: hostname,
      family: family === 4 || family === 6 ? family : undefined,
    });
    // Only "no such name" is ENOTFOUND; anything else (DNS down, tunnel gone) is a failure to try again.
    if (!answer.ok) throw errnoError(answer.code === 'ENOTFOUND' ? 'ENOTFOUND' : 'EAI_AGAIN', 'getaddrinfo', hostname);
    if (!('addresses' in answer)) throw errnoError('EAI_AGAIN', 'getaddrinfo', hostname);
    const addresses = answer.addresses.filter((entry) => !family || entry.family === family);
    if (addresses.length === 0) throw errnoError('ENOTFOUND', 'getaddrinfo', hostname);
    router.remember(addresses.map((entry) => entry.address));
    return addresses;
  };
  const familyOf = (options: unknown): number => {
    const raw = typeof options === 'number' ? options : (options as { family?: unknown } | undefined)?.family;
    if (raw === 'IPv4') return 4;
    if (raw === 'IPv6') return 6;
    return typeof raw === 'number' ? raw : 0;
  };
  const wantsCluster = (hostname: unknown): hostname is string =>
    typeof hostname === 'string' && hostname !== '' && net.isIP(hostname) === 0 && router.route(hostname) === 'cluster';

  const originalLookup = dns.lookup;
  const hookedLookup = (hostname: string, options: unknown, callback?: LookupCallback) => {
    if (typeof options === 'function') {
      callback = options as LookupCallback;
      options = {};
    }
    if (!wantsCluster(hostname) || typeof callback !== 'function') {
      return (originalLookup as (...a: unknown[]) => unknown).call(dns, hostname, options, callback);
    }
    const all = (options as { all?: boolean } | undefined)?.all === true;
    const done = callback;
    clusterLookup(hostname, familyOf(options)).then(
      (addresses) => (all ? done(null, addresses) : done(null, addresses[0].address, addresses[0].family)),
      (err: NodeJS.ErrnoException) => done(err.syscall ? err : errnoError('EAI_AGAIN', 'getaddrinfo', hostname)),
    );
    return {};
  };
  dns.lookup = hookedLookup as unknown as typeof dns.lookup;

  const originalPromisesLookup = dns.promises.lookup;
  const hookedPromisesLookup = async (hostname: string, options?: unknown) => {
    if (!wantsCluster(hostname)) {
      return (originalPromisesLookup as (...a: unknown[]) => Promise<unknown>).call(dns.promises, hostname, options);
    }
    try {
      const addresses = await clusterLookup(hostname, familyOf(options));
      return (options as { all?: boolean } | undefined)?.all === true ? addresses : addresses[0];
    } catch (err) {
      const error = err as NodeJS.ErrnoException;
      throw error.syscall ? error : errnoError('EAI_AGAIN', 'getaddrinfo', hostname);
    }
  };
  dns.promises.lookup = hookedPromisesLookup as unknown as typeof dns.promises.lookup;
  // `import { lookup } from 'node:dns'` reads the ESM view of the builtin: bring it in line with the patched object.
  syncBuiltinESMExports();

  const installed: InstalledHooks = { router, control };
  holder[INSTALLED] = installed;
  return installed;
}
