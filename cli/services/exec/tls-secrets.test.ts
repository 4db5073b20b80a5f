// --tls-secret: which Secret each port uses, and reading it with the user's credentials: its PEMs, or one line for a
// Secret the user may not read (403), one that is not there (404) and one that is not kubernetes.io/tls. The API server
// here is a local one that answers as kube-apiserver does (a Status body with the code).
import { createServer, type Server } from 'node:http';
import { KubeConfig } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseTlsSecretSpec } from '../../config/tls-secret-spec.js';
import { readTlsSecret, readTlsSecrets, secretsByPort } from './tls-secrets.js';

const b64 = (text: string): string => Buffer.from(text).toString('base64');
const CERT = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';
const KEY = '-----BEGIN PRIVATE KEY-----\nMIGH\n-----END PRIVATE KEY-----\n';

describe('--tls-secret values', () => {
  it('gives each port its PORT=NAME, the others the one without a port', () => {
    // Given one Secret for every port and another for 8443
    const specs = ['web-tls', '8443=admin-tls'].map(parseTlsSecretSpec);
    // Then 8443 uses its own and 443 the general one
    expect(Object.fromEntries(secretsByPort(specs, [443, 8443]))).toEqual({ 443: 'web-tls', 8443: 'admin-tls' });
  });

  it('refuses a malformed value, a port the session does not take and two Secrets for every port, in one line', () => {
    expect(() => parseTlsSecretSpec('Web_TLS')).toThrow(/--tls-secret "Web_TLS" is not "\[PORT=\]NAME"/);
    expect(() => parseTlsSecretSpec('70000=web')).toThrow(/is not "\[PORT=\]NAME"/);
    expect(() => secretsByPort([parseTlsSecretSpec('9000=web')], [8443])).toThrow(
      /port 9000 is not among the session's ports \(8443\)/,
    );
    expect(() => secretsByPort(['a', 'b'].map(parseTlsSecretSpec), [8443])).toThrow(/names a and b for every port/);
  });
});

describe('reading the Secret with the user credentials', () => {
  let server: Server;
  let kc: KubeConfig;
  const asked: string[] = [];

  beforeAll(async () => {
    server = createServer((req, res) => {
      asked.push(`${req.method} ${req.url}`);
      const name = req.url?.split('/').pop();
      const answer = (code: number, body: object): void => {
        res.writeHead(code, { 'content-type': 'application/json' });
        res.end(JSON.stringify(body));
      };
      if (name === 'web-tls')
        return answer(200, {
          kind: 'Secret',
          type: 'kubernetes.io/tls',
          metadata: { name },
          data: { 'tls.crt': b64(CERT), 'tls.key': b64(KEY), 'ca.crt': b64(CERT) },
        });
      if (name === 'opaque')
        return answer(200, { kind: 'Secret', type: 'Opaque', metadata: { name }, data: { password: b64('x') } });
      if (name === 'hidden')
        return answer(403, {
          kind: 'Status',
          status: 'Failure',
          reason: 'Forbidden',
          code: 403,
          message: `secrets "hidden" is forbidden: User "alice" cannot get resource "secrets" in the namespace "shop"`,
        });
      return answer(404, { kind: 'Status', status: 'Failure', reason: 'NotFound', code: 404 });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as { port: number }).port;
    kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [{ name: 'c', server: `http://127.0.0.1:${port}`, skipTLSVerify: true }],
      users: [{ name: 'alice', token: 'alice-token' }],
      contexts: [{ name: 'c', cluster: 'c', user: 'alice', namespace: 'shop' }],
      currentContext: 'c',
    });
  });
  afterAll(() => server.close());

  it("reads tls.crt, tls.key and ca.crt of the target's namespace, each Secret once", async () => {
    // When two ports use the same Secret
    const byPort = await readTlsSecrets(kc, 'shop', ['web-tls'], [443, 8443]);
    // Then both get its PEMs, and it was read once, in the target's namespace
    expect(byPort.get(443)).toEqual({ cert: CERT, key: KEY, ca: CERT });
    expect(byPort.get(8443)).toBe(byPort.get(443));
    expect(asked.filter((a) => a.endsWith('/web-tls'))).toEqual(['GET /api/v1/namespaces/shop/secrets/web-tls']);
  });

  it('says in one line that the user may not get it (403), naming the RBAC fix', async () => {
    await expect(readTlsSecret(kc, 'shop', 'hidden')).rejects.toMatchObject({
      message: 'cannot read Secret hidden in namespace shop for --tls-secret: your user may not get it (403)',
      hint: expect.stringContaining('ask for "get" on secrets/hidden in shop'),
    });
  });

  it('says in one line that it is not there (404), and one that is not kubernetes.io/tls', async () => {
    await expect(readTlsSecret(kc, 'shop', 'gone')).rejects.toMatchObject({
      message: 'Secret gone not found in namespace shop (--tls-secret)',
    });
    await expect(readTlsSecret(kc, 'shop', 'opaque')).rejects.toMatchObject({
      message: 'Secret opaque in namespace shop has no tls.crt (its type: Opaque)',
    });
  });
});
