// The ClusterDialer seam: how the local proxy, the preload's control endpoint, remote files and port-forward reach the
// cluster (connect, DNS, file read), plus DialError (the errno a failed dial carries) and a local dialer for unit
// tests.
import { lookup as dnsLookup } from 'node:dns/promises';
import { readFile } from 'node:fs/promises';
import { isIP, connect as netConnect } from 'node:net';
import type { Duplex } from 'node:stream';
import { errorMessage } from '../../shared/errors.js';
import { localUdpAssociation, type UdpAssociation } from './udp.js';

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

export interface ConnectOptions {
  /**
   * Resolve with the connection at once, before the far side has connected: what is written meanwhile travels with the
   * connect and waits there, which saves a round trip to the agent per connection. A connect that then fails emits
   * 'dialError' (a DialError) on the connection, which then errors too. Only for a caller that answers nobody before
   * sending: a proxy must know the connect succeeded before it says so.
   */
  early?: boolean;
}

/** What the session can do from the target pod's network namespace (or, in unit tests, from this machine). */
export interface ClusterDialer {
  /** Connects to host:port; a name is resolved on the far side. Rejects with a DialError naming the errno. */
  connect(host: string, port: number, options?: ConnectOptions): Promise<Duplex>;
  /**
   * Resolves a name as the pod would (cluster DNS, search domains). Rejects with DialError ENOTFOUND when it does not.
   */
  lookup(name: string, family?: 4 | 6): Promise<ResolvedAddress[]>;
  /** Reads a file of the target container. Rejects with DialError ENOENT / EACCES / … */
  readFile(path: string): Promise<Buffer>;
  /** Opens a UDP association from the pod (absent: this dialer carries no UDP). */
  udp?(): UdpAssociation;
}

/** Error codes the proxy and the preload map to SOCKS replies, HTTP 502 bodies and Node errors. */
export type DialErrorCode =
  | 'ENOTFOUND'
  | 'EAI_AGAIN'
  | 'ECONNREFUSED'
  | 'EHOSTUNREACH'
  | 'ENETUNREACH'
  | 'ETIMEDOUT'
  | 'ECONNRESET'
  | 'ENOENT'
  | 'EACCES'
  | 'EISDIR'
  | 'ENOTCONN'
  | 'EFAULT';

const KNOWN_CODES: ReadonlySet<string> = new Set<DialErrorCode>([
  'ENOTFOUND',
  'EAI_AGAIN',
  'ECONNREFUSED',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ETIMEDOUT',
  'ECONNRESET',
  'ENOENT',
  'EACCES',
  'EISDIR',
  'ENOTCONN',
  'EFAULT',
]);

/** c-ares' answers (the agent's resolver) in getaddrinfo's terms: no such name, or try again. */
const DNS_CODES: Record<string, DialErrorCode> = {
  ENODATA: 'ENOTFOUND',
  ENONAME: 'ENOTFOUND',
  ETIMEOUT: 'EAI_AGAIN',
  ESERVFAIL: 'EAI_AGAIN',
  EREFUSED: 'EAI_AGAIN',
};

/** A dial, lookup or file read that failed on the far side; `code` is an errno name, `message` says what was asked. */
export class DialError extends Error {
  readonly code: DialErrorCode;

  constructor(code: DialErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'DialError';
    this.code = code;
  }
}

/**
 * The errno name in a failure reason. Agents reset streams with reasons such as "ECONNREFUSED" or
 * "ENOTFOUND: getaddrinfo ENOTFOUND nosuch"; anything unrecognised is a general failure (EFAULT).
 */
export function dialErrorCode(reasonOrError: unknown): DialErrorCode {
  const code = (reasonOrError as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && KNOWN_CODES.has(code)) return code as DialErrorCode;
  if (typeof code === 'string' && DNS_CODES[code]) return DNS_CODES[code];
  const text =
    typeof reasonOrError === 'string'
      ? reasonOrError
      : ((reasonOrError as { reason?: unknown; message?: unknown } | null)?.reason ??
        (reasonOrError as { message?: unknown } | null)?.message);
  if (typeof text === 'string') {
    const match = /\b(E[A-Z_]{3,})\b/.exec(text);
    // "ECONNREFUSED: cannot resolve x in the pod" is the pod's DNS server refusing, not x: a name failure, try again.
    if (
      match &&
      /cannot resolve|resolv|getaddrinfo|query/i.test(text) &&
      !DNS_CODES[match[1]] &&
      match[1] !== 'ENOTFOUND'
    )
      return 'EAI_AGAIN';
    if (match && KNOWN_CODES.has(match[1])) return match[1] as DialErrorCode;
    if (match && DNS_CODES[match[1]]) return DNS_CODES[match[1]];
  }
  return 'EFAULT';
}

/** Wraps any failure as a DialError, keeping the cause. */
export function toDialError(err: unknown, what: string): DialError {
  if (err instanceof DialError) return err;
  const code = dialErrorCode(err);
  const detail = errorMessage(err);
  return new DialError(code, `${what}: ${detail}`, { cause: err });
}

export interface LocalDialerOptions {
  /** Names this dialer knows (the "cluster DNS" of a unit test); any other non-IP name is ENOTFOUND. */
  hosts?: Record<string, string | string[]>;
  /** Files by absolute path (the "pod filesystem"); when unset, readFile reads this machine's files. */
  files?: Record<string, string | Buffer>;
  /** The "pod's nameserver" of UDP datagrams to host '' (default: none, they are lost). */
  nameserver?: { host: string; port: number };
}

/**
 * A dialer that connects from this machine. It never asks the system resolver (tests must not send DNS queries off the
 * machine): names come from `hosts` only.
 */
export function createLocalDialer(options: LocalDialerOptions = {}): ClusterDialer {
  const hosts = new Map(Object.entries(options.hosts ?? {}).map(([name, value]) => [name.toLowerCase(), value]));
  const lookup = async (name: string, family?: 4 | 6): Promise<ResolvedAddress[]> => {
    const literal = isIP(name);
    if (literal) return [{ address: name, family: literal as 4 | 6 }];
    const known = hosts.get(name.toLowerCase().replace(/\.$/, ''));
    const addresses = (known === undefined ? [] : Array.isArray(known) ? known : [known])
      .map((address) => ({ address, family: isIP(address) as 4 | 6 }))
      .filter((entry) => entry.family !== (0 as number) && (!family || entry.family === family));
    if (addresses.length === 0) throw new DialError('ENOTFOUND', `getaddrinfo ENOTFOUND ${name}`);
    return addresses;
  };
  return {
    lookup,
    udp: () => localUdpAssociation(async (name) => (await lookup(name, 4))[0].address, options.nameserver),
    async connect(host, port) {
      const [first] = await lookup(host);
      return new Promise<Duplex>((resolve, reject) => {
        const socket = netConnect({ host: first.address, port, allowHalfOpen: true });
        socket.once('connect', () => {
          socket.off('error', reject);
          resolve(socket);
        });
        socket.once('error', (err) => reject(toDialError(err, `connect ${host}:${port}`)));
      });
    },
    async readFile(path) {
      if (options.files) {
        const content = options.files[path];
        if (content === undefined) throw new DialError('ENOENT', `open ${path}: no such file`);
        return Buffer.from(content);
      }
      try {
        return await readFile(path);
      } catch (err) {
        throw toDialError(err, `read ${path}`);
      }
    },
  };
}

/**
 * A dialer that resolves names with this machine's resolver and connects to the resulting address through `inner`
 * (devop.json dns.enabled = false: connections go through the pod, names are resolved locally).
 */
export function withLocalNames(inner: ClusterDialer): ClusterDialer {
  const lookup = async (name: string, family?: 4 | 6): Promise<ResolvedAddress[]> => {
    const literal = isIP(name);
    if (literal) return [{ address: name, family: literal as 4 | 6 }];
    try {
      const found = await dnsLookup(name, { all: true, family: family ?? 0 });
      return found.map((entry) => ({ address: entry.address, family: entry.family as 4 | 6 }));
    } catch (err) {
      throw toDialError(err, `getaddrinfo ${name}`);
    }
  };
  return {
    lookup,
    readFile: (path) => inner.readFile(path),
    udp: inner.udp?.bind(inner),
    async connect(host, port, options) {
      const [first] = await lookup(host);
      return inner.connect(first.address, port, options);
    },
  };
}
