// The per-session secret of the local outgoing proxy: any user of this machine can connect to a loopback port, so
// every way in (SOCKS5 username/password, HTTP Proxy-Authorization Basic, the preload's control hello) must present
// it. The local command gets it in its env only (proxy URLs, DEVOP_PRELOAD_CONFIG), never on a command line or a log.
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

/** The user name in the proxy URLs and the SOCKS5 handshake (the secret is the password). */
export const PROXY_USERNAME = 'devop';
/** 192 bits of randomness, as hex: safe inside a URL's userinfo without escaping. */
const SECRET_BYTES = 24;

export function newProxySecret(): string {
  return randomBytes(SECRET_BYTES).toString('hex');
}

/** Compares in constant time (of the digests: lengths may differ). */
export function secretMatches(given: string | Buffer, secret: string): boolean {
  const digest = (value: string | Buffer): Buffer => createHash('sha256').update(value).digest();
  return timingSafeEqual(digest(given), digest(secret));
}

/** Whether a Proxy-Authorization header carries `devop:SECRET` as Basic credentials (RFC 7617). */
export function basicMatches(header: string | undefined, secret: string): boolean {
  const match = /^basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(header ?? '');
  if (!match) return false;
  const decoded = Buffer.from(match[1], 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  if (colon < 0) return false;
  const nameMatches = decoded.slice(0, colon) === PROXY_USERNAME;
  return secretMatches(decoded.slice(colon + 1), secret) && nameMatches;
}

/** Why a connection to the proxy was refused (what the count and the log line say; never the secret). */
export interface ProxyRefusal {
  via: 'socks5' | 'http' | 'control' | 'handover' | 'netns';
  reason: string;
}
