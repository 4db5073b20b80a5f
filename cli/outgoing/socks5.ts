// SOCKS5 (RFC 1928) server side of the local proxy: username/password authentication (RFC 1929) with the session's
// secret, CONNECT and UDP ASSOCIATE (§7: the datagrams' header), IPv4/IPv6 literals and domain names (passed through
// unresolved, so that the agent resolves them with the pod's DNS); dial errors become replies.
import { isIP } from 'node:net';
import type { Socket } from 'node:net';
import type { DialErrorCode } from './dialer.js';
import { PROXY_USERNAME, secretMatches } from './proxy-auth.js';
import { readExactly } from './streams.js';

export const SOCKS_VERSION = 0x05;
/** RFC 1929: username/password, the only method the proxy accepts. */
const METHOD_USERNAME_PASSWORD = 0x02;
const METHOD_NONE_ACCEPTABLE = 0xff;
/** RFC 1929 §2: the sub-negotiation's own version byte, and its status bytes. */
const AUTH_VERSION = 0x01;
const AUTH_SUCCEEDED = 0x00;
const AUTH_FAILED = 0x01;
const CMD_CONNECT = 0x01;
const CMD_UDP_ASSOCIATE = 0x03;
const ATYP_IPV4 = 0x01;
const ATYP_DOMAIN = 0x03;
const ATYP_IPV6 = 0x04;

/** Reply codes (RFC 1928 §6). */
export const SocksReply = {
  succeeded: 0x00,
  generalFailure: 0x01,
  notAllowed: 0x02,
  networkUnreachable: 0x03,
  hostUnreachable: 0x04,
  connectionRefused: 0x05,
  ttlExpired: 0x06,
  commandNotSupported: 0x07,
  addressTypeNotSupported: 0x08,
} as const;

/** The SOCKS reply a failed dial gets: unknown names are unreachable hosts (what socks5h clients print as such). */
export function socksReplyFor(code: DialErrorCode): number {
  switch (code) {
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
    case 'EHOSTUNREACH':
      return SocksReply.hostUnreachable;
    case 'ENETUNREACH':
      return SocksReply.networkUnreachable;
    case 'ECONNREFUSED':
      return SocksReply.connectionRefused;
    case 'ETIMEDOUT':
      return SocksReply.ttlExpired;
    default:
      return SocksReply.generalFailure;
  }
}

/** A reply with a bound address (0.0.0.0:0 when there is none to tell: clients ignore it for CONNECT). */
export function encodeSocksReply(reply: number, bound?: { address: string; port: number }): Buffer {
  const family = bound ? isIP(bound.address) : 0;
  const port = bound?.port ?? 0;
  if (family === 6) {
    const address = ipv6ToBytes(bound!.address);
    return Buffer.concat([Buffer.from([SOCKS_VERSION, reply, 0x00, ATYP_IPV6]), address, portBytes(port)]);
  }
  const octets = family === 4 ? bound!.address.split('.').map(Number) : [0, 0, 0, 0];
  return Buffer.concat([Buffer.from([SOCKS_VERSION, reply, 0x00, ATYP_IPV4, ...octets]), portBytes(port)]);
}

function portBytes(port: number): Buffer {
  const buf = Buffer.alloc(2);
  buf.writeUInt16BE(port);
  return buf;
}

/** A protocol violation by the client: the proxy answers `reply` (when set) and closes. */
export class SocksProtocolError extends Error {
  readonly reply?: number;

  constructor(message: string, reply?: number) {
    super(message);
    this.name = 'SocksProtocolError';
    this.reply = reply;
  }
}

/** A client without the session's credentials: answered (and closed) per RFC 1928/1929, and counted by the proxy. */
export class SocksAuthError extends SocksProtocolError {
  constructor(message: string) {
    super(message);
    this.name = 'SocksAuthError';
  }
}

/**
 * Runs the method negotiation, checks the client's username and password against the session's secret, and reads the
 * CONNECT request. Leaves the socket positioned after the request (the client's payload, if it pipelined some, stays
 * readable). Throws SocksAuthError or SocksProtocolError (after answering) on anything else.
 */
export async function readSocksConnect(
  socket: Socket,
  secret: string,
): Promise<{ host: string; port: number; udp?: true }> {
  const [version, methodCount] = await readExactly(socket, 2, 'SOCKS greeting');
  if (version !== SOCKS_VERSION) throw new SocksProtocolError(`SOCKS version ${version} is not supported`);
  const methods = methodCount > 0 ? await readExactly(socket, methodCount, 'SOCKS greeting') : Buffer.alloc(0);
  if (!methods.includes(METHOD_USERNAME_PASSWORD)) {
    socket.write(Buffer.from([SOCKS_VERSION, METHOD_NONE_ACCEPTABLE]));
    throw new SocksAuthError('the SOCKS client offers no username/password');
  }
  socket.write(Buffer.from([SOCKS_VERSION, METHOD_USERNAME_PASSWORD]));
  const [authVersion, nameLength] = await readExactly(socket, 2, 'SOCKS authentication');
  const name = nameLength > 0 ? await readExactly(socket, nameLength, 'SOCKS authentication') : Buffer.alloc(0);
  const [passwordLength] = await readExactly(socket, 1, 'SOCKS authentication');
  const password =
    passwordLength > 0 ? await readExactly(socket, passwordLength, 'SOCKS authentication') : Buffer.alloc(0);
  const nameMatches = name.toString('utf8') === PROXY_USERNAME;
  if (authVersion !== AUTH_VERSION || !secretMatches(password, secret) || !nameMatches) {
    socket.write(Buffer.from([AUTH_VERSION, AUTH_FAILED]));
    throw new SocksAuthError('wrong SOCKS username or password');
  }
  socket.write(Buffer.from([AUTH_VERSION, AUTH_SUCCEEDED]));

  const [requestVersion, command, , addressType] = await readExactly(socket, 4, 'SOCKS request');
  if (requestVersion !== SOCKS_VERSION) {
    throw new SocksProtocolError(`SOCKS request version ${requestVersion}`, SocksReply.generalFailure);
  }
  let host: string;
  if (addressType === ATYP_IPV4) {
    host = [...(await readExactly(socket, 4, 'SOCKS request'))].join('.');
  } else if (addressType === ATYP_IPV6) {
    host = bytesToIpv6(await readExactly(socket, 16, 'SOCKS request'));
  } else if (addressType === ATYP_DOMAIN) {
    const [length] = await readExactly(socket, 1, 'SOCKS request');
    if (length === 0) throw new SocksProtocolError('empty domain name', SocksReply.hostUnreachable);
    host = (await readExactly(socket, length, 'SOCKS request')).toString('latin1');
  } else {
    throw new SocksProtocolError(`SOCKS address type ${addressType}`, SocksReply.addressTypeNotSupported);
  }
  const port = (await readExactly(socket, 2, 'SOCKS request')).readUInt16BE(0);
  // UDP ASSOCIATE names where the client will send from (often 0.0.0.0:0, "not known yet").
  if (command === CMD_UDP_ASSOCIATE) return { host, port, udp: true };
  if (command !== CMD_CONNECT) {
    throw new SocksProtocolError(
      `SOCKS command ${command} (only CONNECT and UDP ASSOCIATE are supported)`,
      SocksReply.commandNotSupported,
    );
  }
  if (port === 0) throw new SocksProtocolError('port 0', SocksReply.connectionRefused);
  return { host, port };
}

/** One datagram of a UDP association (RFC 1928 §7): its peer and payload; undefined for a fragment or a bad header. */
export function parseSocksUdp(datagram: Buffer): { host: string; port: number; payload: Buffer } | undefined {
  if (datagram.length < 4 || datagram[2] !== 0) return undefined; // FRAG ≠ 0: fragments are not supported (§7)
  const type = datagram[3];
  let at = 4;
  let host: string;
  if (type === ATYP_IPV4 && datagram.length >= at + 4 + 2) {
    host = [...datagram.subarray(at, at + 4)].join('.');
    at += 4;
  } else if (type === ATYP_IPV6 && datagram.length >= at + 16 + 2) {
    host = bytesToIpv6(datagram.subarray(at, at + 16));
    at += 16;
  } else if (type === ATYP_DOMAIN && datagram.length >= at + 1 && datagram[at] > 0) {
    const length = datagram[at];
    if (datagram.length < at + 1 + length + 2) return undefined;
    host = datagram.subarray(at + 1, at + 1 + length).toString('latin1');
    at += 1 + length;
  } else {
    return undefined;
  }
  const port = datagram.readUInt16BE(at);
  return port === 0 ? undefined : { host, port, payload: datagram.subarray(at + 2) };
}

/** A reply datagram of a UDP association: the header naming its source (an IP literal), then the payload. */
export function encodeSocksUdp(host: string, port: number, payload: Buffer): Buffer {
  const family = isIP(host);
  const address =
    family === 6
      ? Buffer.concat([Buffer.from([ATYP_IPV6]), ipv6ToBytes(host)])
      : family === 4
        ? Buffer.from([ATYP_IPV4, ...host.split('.').map(Number)])
        : Buffer.concat([Buffer.from([ATYP_DOMAIN, Buffer.byteLength(host, 'latin1')]), Buffer.from(host, 'latin1')]);
  return Buffer.concat([Buffer.from([0, 0, 0]), address, portBytes(port), payload]);
}

function ipv6ToBytes(address: string): Buffer {
  const buf = Buffer.alloc(16);
  let text = address;
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted) {
    const [a, b, c, d] = dotted[1].split('.').map(Number);
    text = `${text.slice(0, -dotted[1].length)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = text.split('::');
  const headGroups = head ? head.split(':') : [];
  const tailGroups = tail === undefined ? [] : tail ? tail.split(':') : [];
  const groups = [...headGroups, ...Array<string>(8 - headGroups.length - tailGroups.length).fill('0'), ...tailGroups];
  for (const [i, group] of groups.entries()) buf.writeUInt16BE(parseInt(group || '0', 16), i * 2);
  return buf;
}

function bytesToIpv6(bytes: Buffer): string {
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(bytes.readUInt16BE(i).toString(16));
  // Compress the longest run of zero groups so that the name is the canonical one (what the agent and logs print).
  let bestStart = -1;
  let bestLength = 0;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== '0') {
      i += 1;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === '0') j += 1;
    if (j - i > bestLength && j - i > 1) {
      bestStart = i;
      bestLength = j - i;
    }
    i = j;
  }
  if (bestStart < 0) return groups.join(':');
  return `${groups.slice(0, bestStart).join(':')}::${groups.slice(bestStart + bestLength).join(':')}`;
}
