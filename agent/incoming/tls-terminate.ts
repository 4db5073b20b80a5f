// TLS the workload terminates itself, on a filtered port: a connection's first bytes tell a TLS ClientHello from
// HTTP; with the workload's certificate and key (a kubernetes.io/tls Secret the CLI read and sent on its tunnel) the
// agent ends the client's TLS, so the filters see the requests, and opens TLS again towards the pod's own listener and
// the local command. Without them, such a connection goes to the pod untouched.
import {
  createSecureContext,
  connect as connectTls,
  TLSSocket,
  type ConnectionOptions,
  type SecureContext,
} from 'node:tls';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { UserError } from '../../shared/errors.js';
import type { TlsMaterial } from '../../shared/protocol.js';

/** The protocols the agent offers a client (RFC 7301); the client's own preference among them decides. */
export const OFFERED_ALPN = ['h2', 'http/1.1'];

/** A client that starts TLS and does not finish its handshake within this long is closed. */
const HANDSHAKE_TIMEOUT_MS = 30_000;

/**
 * Whether a connection's first bytes are a TLS ClientHello (RFC 8446 §5.1, §4: a handshake record, 0x16, of a TLS
 * 1.x record version 0x0301–0x0304, whose first message is a client_hello, 1); 'more' until the 6 bytes that tell
 * have come. HTTP/1.x starts with a method's letters and HTTP/2 with "PRI", so the first byte alone rules both out.
 */
export function clientHelloKind(seen: Buffer): 'tls' | 'plain' | 'more' {
  if (seen.length === 0) return 'more';
  if (seen[0] !== 0x16) return 'plain';
  if (seen.length > 1 && seen[1] !== 0x03) return 'plain';
  if (seen.length > 2 && (seen[2] < 0x01 || seen[2] > 0x04)) return 'plain';
  if (seen.length < 6) return 'more';
  return seen[5] === 0x01 ? 'tls' : 'plain';
}

/** The line a session hears once per port when a filter meets TLS it has no certificate for. */
export function noCertificateWarning(port: number): string {
  return (
    `port ${port} speaks TLS: the filter cannot read its requests, so its TLS connections go to the pod; ` +
    `pass --tls-secret ${port}=SECRET (the workload's kubernetes.io/tls Secret) to filter them, or steal the whole port`
  );
}

const contexts = new WeakMap<TlsMaterial, SecureContext>();

/** The server side's context of a subscription's material, made once; a key that does not fit is a UserError. */
export function secureContextOf(material: TlsMaterial): SecureContext {
  let context = contexts.get(material);
  if (!context) {
    try {
      context = createSecureContext({ cert: material.cert, key: material.key });
    } catch (err) {
      // OpenSSL's reason names what is wrong (e.g. "key values mismatch"), never the PEM itself.
      throw new UserError(
        `the TLS Secret's certificate and key cannot be used: ${(err as Error).message}`,
        'give a kubernetes.io/tls Secret whose tls.crt and tls.key are a PEM certificate and its own private key',
      );
    }
    contexts.set(material, context);
  }
  return context;
}

/** What the agent knows of a connection it terminated: for the TLS it opens again on the client's behalf. */
export interface Terminated {
  material: TlsMaterial;
  /** The name the client asked for (SNI), if any: the name the far side's certificate is checked against. */
  servername?: string;
  alpn: 'h2' | 'http/1.1';
}

/**
 * Kept on the decrypted socket itself, not in a WeakMap: an HTTP/2 session hands out a proxy of its socket, which
 * reads the socket's own properties but is another object.
 */
const TERMINATED = Symbol('devop.terminatedTls');

/** The TLS the agent ended on this socket (or on the socket an HTTP/2 session's proxy stands for), if it did. */
export function terminatedOf(socket: object | undefined): Terminated | undefined {
  return socket ? (socket as { [TERMINATED]?: Terminated })[TERMINATED] : undefined;
}

/**
 * Ends the client's TLS on `socket` (its ClientHello already read and put back) with the subscription's certificate,
 * offering h2 and http/1.1; `secure` gets the decrypted socket once the handshake is done. A failed or silent
 * handshake closes the connection.
 */
export function terminateTls(
  socket: Socket,
  material: TlsMaterial,
  secure: (plain: TLSSocket, how: Terminated) => void,
  failed: (reason: string) => void,
): void {
  const tls = new TLSSocket(socket, {
    isServer: true,
    secureContext: secureContextOf(material),
    ALPNProtocols: OFFERED_ALPN,
  });
  const timer = setTimeout(
    () => tls.destroy(new Error('the client did not finish its TLS handshake')),
    HANDSHAKE_TIMEOUT_MS,
  );
  timer.unref();
  tls.once('error', (err) => {
    clearTimeout(timer);
    failed(err.message);
    tls.destroy();
    socket.destroy();
  });
  tls.once('secure', () => {
    clearTimeout(timer);
    // As tls.Server does before its 'secureConnection' (lib/_tls_wrap.js onServerSocketSecure): an HTTP/2 session
    // given a socket still marked secureConnecting waits for a 'secureConnect' that only client sockets emit.
    Object.assign(tls, { secureConnecting: false });
    const servername = typeof tls.servername === 'string' && tls.servername !== '' ? tls.servername : undefined;
    const how: Terminated = {
      material,
      ...(servername ? { servername } : {}),
      alpn: tls.alpnProtocol === 'h2' ? 'h2' : 'http/1.1',
    };
    Object.assign(tls, { [TERMINATED]: how });
    secure(tls, how);
  });
}

/**
 * The TLS client options towards the pod's own listener or the local command (which serves the same certificate).
 * With the Secret's ca.crt the far side's chain is verified against it (and its name against the client's SNI, when
 * the client sent one); without it nothing is verified: the pod's listener is reached on the pod's own address, in
 * the pod's network namespace, and the local command through the session's own tunnel, so no one stands in between,
 * and the workload's certificate may name only its Service, never the address the agent dials.
 */
export function upstreamTls(how: Terminated): ConnectionOptions {
  const { material, servername } = how;
  const alpn = { ALPNProtocols: [how.alpn], ...(servername ? { servername } : {}) };
  if (!material.ca) return { ...alpn, rejectUnauthorized: false };
  return { ...alpn, ca: material.ca, ...(servername ? {} : { checkServerIdentity: () => undefined }) };
}

/** TLS again over a stream to the local command (an incoming stream of the session's tunnel). */
export function encryptTowardsLocal(stream: Duplex, how: Terminated): TLSSocket {
  return connectTls({ socket: stream as Socket, ...upstreamTls(how) });
}

/** TLS again towards the pod's own listener at `origin`. */
export function encryptTowardsPod(origin: { host: string; port: number }, how: Terminated): TLSSocket {
  return connectTls({ host: origin.host, port: origin.port, ...upstreamTls(how) });
}
