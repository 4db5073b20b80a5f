// The certificate devop presents when it records a TLS connection (`devop exec --record`): it ends the client's TLS to
// read the exchange, and opens its own to the local command. Made with node:crypto alone (a tiny DER writer, as the
// farm-operator example does for itself), fresh for each session, never written to disk. Clients that check the
// server's certificate against a CA (an APIService with caBundle) refuse it: recording is for insecureSkipTLSVerify
// backends and plain HTTP.
import { generateKeyPairSync, randomBytes, sign } from 'node:crypto';

export interface SessionCert {
  key: string;
  cert: string;
}

const OID = {
  ecdsaWithSha256: '1.2.840.10045.4.3.2',
  commonName: '2.5.4.3',
  subjectAltName: '2.5.29.17',
  basicConstraints: '2.5.29.19',
};

function length(n: number): Buffer {
  if (n < 0x80) return Buffer.from([n]);
  const bytes: number[] = [];
  for (let v = n; v > 0; v = Math.floor(v / 256)) bytes.unshift(v & 0xff);
  return Buffer.from([0x80 | bytes.length, ...bytes]);
}

function tlv(tag: number, ...content: Buffer[]): Buffer {
  const body = Buffer.concat(content);
  return Buffer.concat([Buffer.from([tag]), length(body.length), body]);
}

const seq = (...items: Buffer[]): Buffer => tlv(0x30, ...items);
const set = (...items: Buffer[]): Buffer => tlv(0x31, ...items);

function oid(dotted: string): Buffer {
  const [a, b, ...rest] = dotted.split('.').map(Number);
  const out = [40 * a + b];
  for (const arc of rest) {
    const chunk = [arc & 0x7f];
    for (let v = Math.floor(arc / 128); v > 0; v = Math.floor(v / 128)) chunk.unshift(0x80 | (v & 0x7f));
    out.push(...chunk);
  }
  return tlv(0x06, Buffer.from(out));
}

function time(d: Date): Buffer {
  // RFC 5280: UTCTime through 2049, GeneralizedTime from 2050 on.
  const iso = `${d.toISOString().replace(/[-:T]/g, '').slice(0, 14)}Z`;
  return d.getUTCFullYear() < 2050 ? tlv(0x17, Buffer.from(iso.slice(2))) : tlv(0x18, Buffer.from(iso));
}

function name(commonName: string): Buffer {
  return seq(set(seq(oid(OID.commonName), tlv(0x0c, Buffer.from(commonName, 'utf8')))));
}

function subjectAltName(altNames: string[]): Buffer {
  const entries = altNames.map((n) => tlv(0x82, Buffer.from(n, 'ascii')));
  return seq(oid(OID.subjectAltName), tlv(0x04, seq(...entries)));
}

function toPem(label: string, der: Buffer): string {
  const lines = der.toString('base64').match(/.{1,64}/g) ?? [];
  return `-----BEGIN ${label}-----\n${lines.join('\n')}\n-----END ${label}-----\n`;
}

/** A fresh EC P-256 key and a self-signed certificate for it, valid for a day. */
export function sessionCert(now = new Date()): SessionCert {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  const notBefore = new Date(now.getTime() - 5 * 60_000); // tolerate small clock skew between hosts
  const notAfter = new Date(now.getTime() + 86_400_000);
  const serial = randomBytes(16);
  // A DER INTEGER is positive when its top bit is clear, and minimal when its first byte is not zero: 01xxxxxx is both.
  serial[0] = (serial[0] & 0x3f) | 0x40;
  const algorithm = seq(oid(OID.ecdsaWithSha256));
  const subject = name('devop recording');
  const tbs = seq(
    tlv(0xa0, tlv(0x02, Buffer.from([2]))), // version v3
    tlv(0x02, serial),
    algorithm,
    subject,
    seq(time(notBefore), time(notAfter)),
    subject,
    publicKey.export({ type: 'spki', format: 'der' }),
    tlv(0xa3, seq(subjectAltName(['localhost']), seq(oid(OID.basicConstraints), tlv(0x04, seq())))),
  );
  const signature = sign('sha256', tbs, privateKey);
  const cert = seq(tbs, algorithm, tlv(0x03, Buffer.from([0]), signature));
  return { key: privateKey.export({ type: 'pkcs8', format: 'pem' }) as string, cert: toPem('CERTIFICATE', cert) };
}
