// The pure-node self-signed certificate: valid X.509 that a real TLS handshake accepts.
import { X509Certificate } from 'node:crypto';
import { createServer, connect, type TLSSocket } from 'node:tls';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { selfSignedCert } from './cert.js';

describe('selfSignedCert', () => {
  it('makes a self-signed certificate with the asked names and validity', () => {
    // Given a fixed clock
    const now = new Date('2030-01-02T03:04:05Z');
    // When a certificate is made for DNS names and IPs
    const { cert } = selfSignedCert({
      commonName: 'farm-operator',
      altNames: ['localhost', 'farm-operator.default.svc', '127.0.0.1', '::1'],
      validDays: 30,
      now,
    });
    // Then it parses, is signed by its own key and names exactly what was asked
    const x = new X509Certificate(cert);
    expect(x.subject).toBe('CN=farm-operator');
    expect(x.issuer).toBe('CN=farm-operator');
    expect(x.verify(x.publicKey)).toBe(true);
    expect(x.subjectAltName).toBe(
      'DNS:localhost, DNS:farm-operator.default.svc, IP Address:127.0.0.1, IP Address:0:0:0:0:0:0:0:1',
    );
    expect(new Date(x.validTo).getTime() - now.getTime()).toBe(30 * 86_400_000);
    expect(new Date(x.validFrom).getTime()).toBeLessThan(now.getTime());
  });

  it('uses GeneralizedTime past 2049 and still parses', () => {
    const { cert } = selfSignedCert({
      commonName: 'late',
      altNames: ['localhost'],
      validDays: 400,
      now: new Date('2049-12-01T00:00:00Z'),
    });
    expect(new Date(new X509Certificate(cert).validTo).getUTCFullYear()).toBe(2051);
  });

  it('is valid DER for any random serial: minimal and positive, never a leading zero byte', () => {
    for (let i = 0; i < 600; i += 1) {
      const { cert } = selfSignedCert({ commonName: 'farm-operator', altNames: ['localhost'] });
      const x = new X509Certificate(cert);
      expect(x.serialNumber).toMatch(/^[4-7][0-9A-F]{31}$/);
    }
  });

  it('is accepted by a TLS client that trusts it, for its DNS name', async () => {
    // Given a TLS server on loopback with a fresh certificate
    const tls = selfSignedCert({ commonName: 'farm-operator', altNames: ['localhost'] });
    const server = createServer({ key: tls.key, cert: tls.cert }, (socket) => socket.end('hello'));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      // When a client that trusts exactly this certificate connects with servername localhost
      const reply = await new Promise<string>((resolve, reject) => {
        const socket: TLSSocket = connect({
          host: '127.0.0.1',
          port: (server.address() as AddressInfo).port,
          servername: 'localhost',
          ca: tls.cert,
        });
        let data = '';
        socket.on('data', (d) => (data += d.toString()));
        socket.on('end', () => resolve(data));
        socket.on('error', reject);
      });
      // Then the handshake verifies and the bytes arrive
      expect(reply).toBe('hello');
    } finally {
      server.close();
    }
  });
});
