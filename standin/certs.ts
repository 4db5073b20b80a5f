// The stand-in's PKI: a throwaway CA and a serving certificate for the API server, and the aggregator's front-proxy
// CA and client certificate, made with the openssl CLI.
import { execFile } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface ClusterCerts {
  caPath: string;
  caPem: string;
  certPem: string;
  keyPem: string;
}

/** Names and addresses clients use for the API server: loopback, and the `kubernetes` Service as pods see it. */
export function servingNames(kubernetesServiceIP: string): string[] {
  return [
    'IP:127.0.0.1',
    `IP:${kubernetesServiceIP}`,
    'DNS:localhost',
    'DNS:kubernetes',
    'DNS:kubernetes.default',
    'DNS:kubernetes.default.svc',
    'DNS:kubernetes.default.svc.cluster.local',
  ];
}

/** Writes ca.crt/ca.key/apiserver.crt/apiserver.key into `dir` (P-256 keys: fast to make, accepted by Go and Node). */
/** Runs the openssl CLI in `dir`, naming the package when it is missing. */
function opensslIn(dir: string): (args: string[]) => Promise<void> {
  return async (args) => {
    try {
      await run('openssl', args, { cwd: dir });
    } catch (e) {
      const err = e as NodeJS.ErrnoException & { stderr?: string };
      if (err.code === 'ENOENT')
        throw new Error(
          'openssl is not installed: the stand-in cluster needs it to make its CA (apt-get install openssl)',
        );
      throw new Error(`openssl ${args[0]} failed: ${err.stderr ?? err.message}`);
    }
  };
}

const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

type OpenSSL = ReturnType<typeof opensslIn>;

/** A self-signed CA valid for ten years: `<name>.crt` and `<name>.key` in `dir`. */
async function makeCA(openssl: OpenSSL, dir: string, name: string, commonName: string): Promise<void> {
  await openssl([
    'req',
    '-x509',
    ...ec,
    '-keyout',
    join(dir, `${name}.key`),
    '-out',
    join(dir, `${name}.crt`),
    '-days',
    '3650',
    '-subj',
    `/CN=${commonName}`,
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign,cRLSign,digitalSignature',
  ]);
}

/** A leaf certificate signed by CA `ca`, with the given X.509 v3 extensions: `<name>.crt` and `<name>.key`. */
async function issueCert(
  openssl: OpenSSL,
  dir: string,
  cert: { ca: string; name: string; commonName: string; extensions: string[] },
): Promise<void> {
  const p = (suffix: string) => join(dir, `${cert.name}.${suffix}`);
  await openssl(['req', ...ec, '-keyout', p('key'), '-out', p('csr'), '-subj', `/CN=${cert.commonName}`]);
  await writeFile(p('ext'), [...cert.extensions, ''].join('\n'));
  await openssl([
    'x509',
    '-req',
    '-in',
    p('csr'),
    '-CA',
    join(dir, `${cert.ca}.crt`),
    '-CAkey',
    join(dir, `${cert.ca}.key`),
    '-CAcreateserial',
    '-out',
    p('crt'),
    '-days',
    '3650',
    '-extfile',
    p('ext'),
  ]);
}

export async function makeCerts(dir: string, sans: string[]): Promise<ClusterCerts> {
  const p = (f: string) => join(dir, f);
  const openssl = opensslIn(dir);
  await makeCA(openssl, dir, 'ca', 'devop-standin-ca');
  await issueCert(openssl, dir, {
    ca: 'ca',
    name: 'apiserver',
    commonName: 'kube-apiserver',
    extensions: [
      `subjectAltName=${sans.join(',')}`,
      'basicConstraints=critical,CA:FALSE',
      'keyUsage=critical,digitalSignature,keyEncipherment',
      'extendedKeyUsage=serverAuth',
    ],
  });
  const [caPem, certPem, keyPem] = await Promise.all(
    ['ca.crt', 'apiserver.crt', 'apiserver.key'].map((f) => readFile(p(f), 'utf8')),
  );
  return { caPath: p('ca.crt'), caPem, certPem, keyPem };
}

export interface FrontProxyCerts {
  caPem: string;
  certPem: string;
  keyPem: string;
}

/**
 * The front-proxy CA and the client certificate the aggregator presents to APIService servers (CN front-proxy-client,
 * clientAuth), as kubeadm makes them for kube-apiserver's --proxy-client-cert-file; an aggregated server trusts the
 * X-Remote-* headers of a connection that presents it (k8s.io/apiserver pkg/authentication/request/headerrequest).
 */
export async function makeFrontProxyCerts(dir: string): Promise<FrontProxyCerts> {
  const openssl = opensslIn(dir);
  await makeCA(openssl, dir, 'front-proxy-ca', 'front-proxy-ca');
  await issueCert(openssl, dir, {
    ca: 'front-proxy-ca',
    name: 'front-proxy-client',
    commonName: 'front-proxy-client',
    extensions: [
      'basicConstraints=critical,CA:FALSE',
      'keyUsage=critical,digitalSignature',
      'extendedKeyUsage=clientAuth',
    ],
  });
  const [caPem, certPem, keyPem] = await Promise.all(
    ['front-proxy-ca.crt', 'front-proxy-client.crt', 'front-proxy-client.key'].map((f) =>
      readFile(join(dir, f), 'utf8'),
    ),
  );
  return { caPem, certPem, keyPem };
}
