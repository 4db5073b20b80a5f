// Telling a TLS ClientHello from HTTP by a connection's first bytes: real ClientHellos (Node's TLS 1.2 and 1.3
// clients), HTTP/1.x heads, the HTTP/2 preface, and the bytes before a decision can be made.
import { createServer } from 'node:net';
import { connect } from 'node:tls';
import { describe, expect, it } from 'vitest';
import { HTTP2_PREFACE } from './http2-filter.js';
import { clientHelloKind } from './tls-terminate.js';

/** The first bytes a TLS client sends, as a server socket reads them. */
async function firstBytesOf(options: { minVersion?: 'TLSv1.2'; maxVersion?: 'TLSv1.2' }): Promise<Buffer> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const first = new Promise<Buffer>((resolve) =>
    server.once('connection', (socket) => socket.once('data', (chunk: Buffer) => resolve(chunk))),
  );
  const port = (server.address() as { port: number }).port;
  const client = connect({ host: '127.0.0.1', port, servername: 'api.test', ALPNProtocols: ['h2'], ...options });
  client.on('error', () => undefined);
  const bytes = await first;
  client.destroy();
  server.close();
  return bytes;
}

describe('a TLS ClientHello among first bytes', () => {
  it("tells Node's TLS 1.3 and TLS 1.2 ClientHellos, whole or cut after their first 6 bytes", async () => {
    // Given the first bytes of a default (TLS 1.3) client and of a TLS 1.2 only one
    for (const hello of [await firstBytesOf({}), await firstBytesOf({ maxVersion: 'TLSv1.2' })]) {
      // Then each is a ClientHello, whole and from its 6th byte on
      expect(clientHelloKind(hello)).toBe('tls');
      expect(clientHelloKind(hello.subarray(0, 6))).toBe('tls');
      // And fewer bytes wait for more
      for (let n = 1; n < 6; n++) expect(clientHelloKind(hello.subarray(0, n))).toBe('more');
    }
  });

  it('says plain for HTTP/1.x heads and the HTTP/2 preface, from their first byte', () => {
    // Given what HTTP clients send first
    const firsts = [Buffer.from('GET / HTTP/1.1\r\n'), Buffer.from('POST /x HTTP/1.0\r\n'), HTTP2_PREFACE];
    // Then none is TLS, and one byte is enough to know
    for (const bytes of firsts) {
      expect(clientHelloKind(bytes)).toBe('plain');
      expect(clientHelloKind(bytes.subarray(0, 1))).toBe('plain');
    }
  });

  it('says plain for other TLS records and for a 0x16 that starts no TLS record', () => {
    // Given a TLS handshake record that is not a ClientHello (a ServerHello, 2), a record of an unknown version, and
    // an application data record (23)
    const serverHello = Buffer.from([0x16, 0x03, 0x03, 0x00, 0x40, 0x02]);
    const badVersion = Buffer.from([0x16, 0x03, 0x09, 0x00, 0x40, 0x01]);
    const notTls = Buffer.from([0x16, 0x41, 0x42]);
    const appData = Buffer.from([0x17, 0x03, 0x03, 0x00, 0x10, 0x01]);
    // Then none of them is taken for a ClientHello
    for (const bytes of [serverHello, badVersion, notTls, appData]) expect(clientHelloKind(bytes)).toBe('plain');
    // And nothing read yet decides nothing
    expect(clientHelloKind(Buffer.alloc(0))).toBe('more');
  });
});
