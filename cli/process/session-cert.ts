// A TLS certificate made per session for 127.0.0.1 and localhost, never written to disk: the --shadow API proxy serves
// with it (the local command's kubeconfig trusts exactly this certificate: client-go sends no bearer token over plain
// HTTP), and --record presents it when it ends a client's TLS to read the exchange. node-forge builds the certificate
// (Node has no X.509 writer); Node makes the key.
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import forge from 'node-forge';

export interface SessionCert {
  /** PEM, as node:tls takes them. */
  cert: string;
  key: string;
}

/** Longer than any session: the certificate dies with the proxy anyway. */
const VALID_DAYS = 30;
/** Clocks a little behind the machine's (containers, VMs) still accept the certificate. */
const BACKDATE_MS = 5 * 60_000;
/** SubjectAltName entry types (RFC 5280): dNSName and iPAddress. */
const SAN_DNS = 2;
const SAN_IP = 7;

export function makeSessionCert(commonName: string): SessionCert {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const keyPem = privateKey.export({ type: 'pkcs1', format: 'pem' }) as string;
  const cert = forge.pki.createCertificate();
  cert.publicKey = forge.pki.publicKeyFromPem(publicKey.export({ type: 'spki', format: 'pem' }) as string);
  // A positive serial (leading 0x01), unique enough for a certificate no one else trusts.
  cert.serialNumber = `01${randomBytes(8).toString('hex')}`;
  cert.validity.notBefore = new Date(Date.now() - BACKDATE_MS);
  cert.validity.notAfter = new Date(Date.now() + VALID_DAYS * 86_400_000);
  const name = [{ name: 'commonName', value: commonName }];
  cert.setSubject(name);
  cert.setIssuer(name);
  cert.setExtensions([
    // Its own CA: the kubeconfig trusts exactly this certificate.
    { name: 'basicConstraints', cA: true, critical: true },
    { name: 'keyUsage', keyCertSign: true, digitalSignature: true, keyEncipherment: true, critical: true },
    { name: 'extKeyUsage', serverAuth: true },
    {
      name: 'subjectAltName',
      altNames: [
        { type: SAN_IP, ip: '127.0.0.1' },
        { type: SAN_DNS, value: 'localhost' },
      ],
    },
  ]);
  cert.sign(forge.pki.privateKeyFromPem(keyPem), forge.md.sha256.create());
  return { cert: forge.pki.certificateToPem(cert), key: keyPem };
}
