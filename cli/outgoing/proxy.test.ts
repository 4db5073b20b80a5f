// Unit tests of the local outgoing proxy with a local dialer: SOCKS5 and HTTP (CONNECT, absolute-URI) parsing, names
// passed through unresolved, and every failure mapped to its SOCKS reply or HTTP 502 reason. Real sockets, real curl.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exchange, recordingDialer, startHttpEcho, startTcpEcho, type Closable } from '../../testkit/outgoing.js';
import { DialError, createLocalDialer, type ClusterDialer } from './dialer.js';
import { startOutgoingProxy, type OutgoingProxy } from './proxy.js';
import { SocksReply } from './socks5.js';

const run = promisify(execFile);

/** The proxies of these tests take this secret (a session's is random). */
const SECRET = 'test-session-secret';
const BASIC = `Basic ${Buffer.from(`devop:${SECRET}`).toString('base64')}`;
/** Method offer (username/password) and its RFC 1929 sub-negotiation with the secret. */
const GREETING = Buffer.concat([
  Buffer.from([0x05, 0x01, 0x02, 0x01, 5]),
  Buffer.from('devop'),
  Buffer.from([SECRET.length]),
  Buffer.from(SECRET),
]);
/** Method selection (2 bytes) and the authentication's status (2 bytes) before the CONNECT reply. */
const AUTH = 4;
function connectRequest(host: string, port: number): Buffer {
  const name = Buffer.from(host, 'latin1');
  const tail = Buffer.alloc(2);
  tail.writeUInt16BE(port);
  return Buffer.concat([Buffer.from([0x05, 0x01, 0x00, 0x03, name.length]), name, tail]);
}
/** Method selection and authentication (4 bytes) + a reply with an IPv4 bound address (10 bytes). */
const SOCKS_ANSWER_LENGTH = AUTH + 10;

describe('local outgoing proxy (local dialer)', () => {
  let http: Closable;
  let tcp: Closable;
  let dialer: ReturnType<typeof recordingDialer>;
  let proxy: OutgoingProxy;

  beforeAll(async () => {
    http = await startHttpEcho('echo');
    tcp = await startTcpEcho();
    // Given a "cluster" where echo.default and its full name resolve, and nothing else does
    dialer = recordingDialer(
      createLocalDialer({ hosts: { 'echo.default': '127.0.0.1', 'echo.default.svc.cluster.local': '127.0.0.1' } }),
    );
    proxy = await startOutgoingProxy({ dialer, secret: SECRET });
  });
  afterAll(async () => {
    await proxy?.close();
    await http?.close();
    await tcp?.close();
  });

  it('listens on a random loopback port', () => {
    expect(proxy.host).toBe('127.0.0.1');
    expect(proxy.port).toBeGreaterThan(0);
    expect(proxy.address).toBe(`127.0.0.1:${proxy.port}`);
  });

  it('SOCKS5: passes a domain name to the dialer unresolved and relays bytes both ways', async () => {
    // When a client asks for echo.default by name and sends a payload in the same write (pipelined)
    const payload = Buffer.from('hello through socks');
    const { received } = await exchange(
      proxy.port,
      Buffer.concat([GREETING, connectRequest('echo.default', tcp.port), payload]),
      (got) => got.length >= SOCKS_ANSWER_LENGTH + payload.length,
    );
    // Then the method is username/password, it succeeds, the reply succeeds, and the payload comes back
    expect([...received.subarray(0, AUTH)]).toEqual([0x05, 0x02, 0x01, 0x00]);
    expect([...received.subarray(AUTH, AUTH + 3)]).toEqual([0x05, SocksReply.succeeded, 0x00]);
    expect(received.subarray(SOCKS_ANSWER_LENGTH).toString()).toBe(payload.toString());
    expect(dialer.calls).toContainEqual({ op: 'connect', target: `echo.default:${tcp.port}` });
  });

  it('SOCKS5: IPv4 and IPv6 literals reach the dialer as addresses', async () => {
    const v4 = Buffer.from([0x05, 0x01, 0x00, 0x01, 127, 0, 0, 1, tcp.port >> 8, tcp.port & 0xff]);
    const first = await exchange(
      proxy.port,
      Buffer.concat([GREETING, v4, Buffer.from('x')]),
      (got) => got.length >= SOCKS_ANSWER_LENGTH + 1,
    );
    expect(first.received[AUTH + 1]).toBe(SocksReply.succeeded);
    expect(dialer.calls).toContainEqual({ op: 'connect', target: `127.0.0.1:${tcp.port}` });

    const v6 = Buffer.concat([Buffer.from([0x05, 0x01, 0x00, 0x04]), Buffer.alloc(15), Buffer.from([1, 0, 9])]);
    const second = await exchange(proxy.port, Buffer.concat([GREETING, v6]), (got) => got.length >= AUTH + 10);
    // ::1 port 9: nothing listens there, so the dial is refused, and the address reached the dialer in canonical form
    expect(dialer.calls).toContainEqual({ op: 'connect', target: '::1:9' });
    expect(second.received[AUTH + 1]).toBe(SocksReply.connectionRefused);
  });

  it('SOCKS5: a name the cluster does not know is "host unreachable", a closed port "connection refused"', async () => {
    const unknown = await exchange(
      proxy.port,
      Buffer.concat([GREETING, connectRequest('nosuch.default', 80)]),
      () => false,
    );
    expect(unknown.ended).toBe(true);
    expect([...unknown.received.subarray(AUTH, AUTH + 2)]).toEqual([0x05, SocksReply.hostUnreachable]);

    const refused = await exchange(
      proxy.port,
      Buffer.concat([GREETING, connectRequest('echo.default', 9)]),
      () => false,
    );
    expect(refused.ended).toBe(true);
    expect([...refused.received.subarray(AUTH, AUTH + 2)]).toEqual([0x05, SocksReply.connectionRefused]);
  });

  it('SOCKS5: protocol errors get their reply codes and the connection closes', async () => {
    // No acceptable method (only "no authentication" offered)
    const noAuth = await exchange(proxy.port, Buffer.from([0x05, 0x01, 0x00]), () => false);
    expect([...noAuth.received]).toEqual([0x05, 0xff]);
    expect(noAuth.ended).toBe(true);
    // BIND is not supported
    const bind = Buffer.from([0x05, 0x02, 0x00, 0x01, 127, 0, 0, 1, 0, 80]);
    const bound = await exchange(proxy.port, Buffer.concat([GREETING, bind]), () => false);
    expect(bound.received[AUTH + 1]).toBe(SocksReply.commandNotSupported);
    expect(bound.ended).toBe(true);
    // An unknown address type
    const badType = Buffer.from([0x05, 0x01, 0x00, 0x09, 1, 2, 3, 4, 0, 80]);
    const typed = await exchange(proxy.port, Buffer.concat([GREETING, badType]), () => false);
    expect(typed.received[AUTH + 1]).toBe(SocksReply.addressTypeNotSupported);
    expect(typed.ended).toBe(true);
  });

  it('SOCKS5: any other dial failure is a general failure', async () => {
    const failing: ClusterDialer = {
      ...createLocalDialer(),
      connect: () => Promise.reject(new Error('the tunnel broke')),
    };
    const other = await startOutgoingProxy({ dialer: failing, secret: SECRET });
    try {
      const { received } = await exchange(
        other.port,
        Buffer.concat([GREETING, connectRequest('echo.default', 80)]),
        () => false,
      );
      expect(received[AUTH + 1]).toBe(SocksReply.generalFailure);
    } finally {
      await other.close();
    }
  });

  it('curl through socks5h:// and through the HTTP proxy reaches the service by name', async () => {
    for (const proxyUrl of [
      `socks5h://devop:${SECRET}@127.0.0.1:${proxy.port}`,
      `http://devop:${SECRET}@127.0.0.1:${proxy.port}`,
    ]) {
      for (const proxytunnel of [[], ['--proxytunnel']]) {
        if (proxyUrl.startsWith('socks') && proxytunnel.length) continue;
        const { stdout } = await run('curl', [
          '-sS',
          '--max-time',
          '10',
          ...proxytunnel,
          '-x',
          proxyUrl,
          '-d',
          'ping',
          `http://echo.default.svc.cluster.local:${http.port}/path?q=1`,
        ]);
        const answer = JSON.parse(stdout) as { method: string; url: string; host: string; body: string };
        expect(answer, `${proxyUrl} ${proxytunnel.join(' ')}`).toMatchObject({
          method: 'POST',
          url: '/path?q=1',
          host: `echo.default.svc.cluster.local:${http.port}`,
          body: 'ping',
        });
      }
    }
  });

  it('HTTP: absolute-URI requests keep the connection alive across requests', async () => {
    const { stdout } = await run('curl', [
      '-sS',
      '--max-time',
      '10',
      '-x',
      `http://devop:${SECRET}@127.0.0.1:${proxy.port}`,
      `http://echo.default:${http.port}/one`,
      `http://echo.default:${http.port}/two`,
    ]);
    expect(stdout).toContain('"url":"/one"');
    expect(stdout).toContain('"url":"/two"');
  });

  it('HTTP: CONNECT to an unknown name is a 502 naming ENOTFOUND; a refused port names ECONNREFUSED', async () => {
    const unknown = await exchange(
      proxy.port,
      Buffer.from(
        `CONNECT nosuch.default:443 HTTP/1.1\r\nHost: nosuch.default:443\r\nProxy-Authorization: ${BASIC}\r\n\r\n`,
      ),
      () => false,
    );
    const text = unknown.received.toString();
    expect(text).toMatch(/^HTTP\/1\.1 502 Bad Gateway\r\n/);
    expect(text).toContain('X-Devop-Error: ENOTFOUND');
    expect(text).toContain('nosuch.default does not resolve from the pod');

    const refused = await exchange(
      proxy.port,
      Buffer.from(`CONNECT echo.default:9 HTTP/1.1\r\nHost: echo.default:9\r\nProxy-Authorization: ${BASIC}\r\n\r\n`),
      () => false,
    );
    expect(refused.received.toString()).toContain('X-Devop-Error: ECONNREFUSED');
  });

  it('HTTP: CONNECT with a bad authority is a 400; an origin-form request says what the port is', async () => {
    const bad = await exchange(
      proxy.port,
      Buffer.from(`CONNECT no-port-here HTTP/1.1\r\nProxy-Authorization: ${BASIC}\r\n\r\n`),
      () => false,
    );
    expect(bad.received.toString()).toMatch(/^HTTP\/1\.1 400/);
    const origin = await exchange(
      proxy.port,
      Buffer.from(`GET /x HTTP/1.1\r\nHost: a\r\nProxy-Authorization: ${BASIC}\r\nConnection: close\r\n\r\n`),
      () => false,
    );
    expect(origin.received.toString()).toMatch(/^HTTP\/1\.1 400[\s\S]*devop's outgoing proxy/);
  });

  it('HTTP: an absolute-URI upgrade (WebSocket over http://) is passed on and the bytes after it flow both ways', async () => {
    // Given a server that accepts upgrades and then echoes bytes
    const { createServer } = await import('node:http');
    const upgrading = createServer();
    upgrading.on('upgrade', (req, socket: import('node:net').Socket, head: Buffer) => {
      socket.write(
        `HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\nX-Path: ${req.url}\r\n\r\n`,
      );
      if (head.length) socket.write(head);
      socket.pipe(socket);
    });
    await new Promise<void>((resolve) => upgrading.listen(0, '127.0.0.1', () => resolve()));
    const port = (upgrading.address() as { port: number }).port;
    try {
      // When a client asks the proxy for the upgrade by absolute URI, with the first bytes in the same packet
      const head =
        `GET http://echo.default:${port}/ws?x=1 HTTP/1.1\r\nHost: echo.default:${port}\r\nConnection: ` +
        `Upgrade\r\nUpgrade: echo\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: ${BASIC}\r\n\r\n`;
      const { received } = await exchange(proxy.port, Buffer.from(`${head}after-upgrade`), (got) =>
        got.toString().endsWith('after-upgrade'),
      );
      // Then the server saw the origin-form path, answered 101, and echoed the bytes
      const text = received.toString();
      expect(text).toMatch(/^HTTP\/1\.1 101 Switching Protocols\r\n/);
      expect(text).toContain('X-Path: /ws?x=1');
      expect(text.endsWith('\r\n\r\nafter-upgrade')).toBe(true);
    } finally {
      upgrading.closeAllConnections();
      await new Promise<void>((resolve) => upgrading.close(() => resolve()));
    }
  });

  it('HTTP: a plain request to an unknown name is a 502 whose body gives the reason', async () => {
    const result = await run('curl', [
      '-sS',
      '--max-time',
      '10',
      '-o',
      '-',
      '-w',
      '\n%{http_code}',
      '-x',
      `http://devop:${SECRET}@127.0.0.1:${proxy.port}`,
      `http://nosuch.default:${http.port}/`,
    ]);
    expect(result.stdout).toContain('ENOTFOUND: nosuch.default does not resolve from the pod');
    expect(result.stdout.trim().endsWith('502')).toBe(true);
  });

  it('close() ends the connections it holds', async () => {
    // Given a second proxy with one open tunnel
    const other = await startOutgoingProxy({ dialer, secret: SECRET });
    const { connect } = await import('node:net');
    const client = connect({ port: other.port, host: '127.0.0.1' });
    client.write(Buffer.concat([GREETING, connectRequest('echo.default', tcp.port)]));
    await new Promise<void>((resolve) => client.once('data', () => resolve()));
    const closed = new Promise<void>((resolve) => client.once('close', () => resolve()));
    client.on('error', () => undefined);
    // When the proxy closes / Then the client's connection closes too
    await other.close();
    await closed;
    expect(client.destroyed).toBe(true);
  });

  it('keeps DialError codes when the dialer names them', async () => {
    const timingOut: ClusterDialer = {
      ...createLocalDialer(),
      connect: () => Promise.reject(new DialError('ETIMEDOUT', 'connect timed out')),
    };
    const other = await startOutgoingProxy({ dialer: timingOut, secret: SECRET });
    try {
      const { received } = await exchange(
        other.port,
        Buffer.concat([GREETING, connectRequest('slow.default', 80)]),
        () => false,
      );
      expect(received[AUTH + 1]).toBe(SocksReply.ttlExpired);
    } finally {
      await other.close();
    }
  });
});
