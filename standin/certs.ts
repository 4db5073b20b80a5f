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

export async function makeCerts(dir: string, sans: string[]): Promise<ClusterCerts> {
  const p = (f: string) => join(dir, f);
  const openssl = opensslIn(dir);
  await openssl([
    'req',
    '-x509',
    ...ec,
    '-keyout',
    p('ca.key'),
    '-out',
    p('ca.crt'),
    '-days',
    '3650',
    '-subj',
    '/CN=devop-standin-ca',
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign,cRLSign,digitalSignature',
  ]);
  await openssl([
    'req',
    ...ec,
    '-keyout',
    p('apiserver.key'),
    '-out',
    p('apiserver.csr'),
    '-subj',
    '/CN=kube-apiserver',
  ]);
  await writeFile(
    p('apiserver.ext'),
    [
      `subjectAltName=${sans.join(',')}`,
      'basicConstraints=critical,CA:FALSE',
      'keyUsage=critical,digitalSignature,keyEncipherment',
      'extendedKeyUsage=serverAuth',
      '',
    ].join('\n'),
  );
  await openssl([
    'x509',
    '-req',
    '-in',
    p('apiserver.csr'),
    '-CA',
    p('ca.crt'),
    '-CAkey',
    p('ca.key'),
    '-CAcreateserial',
    '-out',
    p('apiserver.crt'),
    '-days',
    '3650',
    '-extfile',
    p('apiserver.ext'),
  ]);
  const [caPem, certPem, keyPem] = await Promise.all([
    readFile(p('ca.crt'), 'utf8'),
    readFile(p('apiserver.crt'), 'utf8'),
    readFile(p('apiserver.key'), 'utf8'),
  ]);
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
  const p = (f: string) => join(dir, f);
  const openssl = opensslIn(dir);
  await openssl([
    'req',
    '-x509',
    ...ec,
    '-keyout',
    p('front-proxy-ca.key'),
    '-out',
    p('front-proxy-ca.crt'),
    '-days',
    '3650',
    '-subj',
    '/CN=front-proxy-ca',
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign,cRLSign,digitalSignature',
  ]);
  await openssl(
    ['req', ...ec, '-keyout', p('front-proxy-client.key'), '-out', p('front-proxy-client.csr')].concat([
      '-subj',
      '/CN=front-proxy-client',
    ]),
  );
  await writeFile(
    p('front-proxy-client.ext'),
    [
      'basicConstraints=critical,CA:FALSE',
      'keyUsage=critical,digitalSignature',
      'extendedKeyUsage=clientAuth',
      '',
    ].join('\n'),
  );
  await openssl([
    'x509',
    '-req',
    '-in',
    p('front-proxy-client.csr'),
    '-CA',
    p('front-proxy-ca.crt'),
    '-CAkey',
    p('front-proxy-ca.key'),
    '-CAcreateserial',
    '-out',
    p('front-proxy-client.crt'),
    '-days',
    '3650',
    '-extfile',
    p('front-proxy-client.ext'),
  ]);
  const [caPem, certPem, keyPem] = await Promise.all(
    ['front-proxy-ca.crt', 'front-proxy-client.crt', 'front-proxy-client.key'].map((f) => readFile(p(f), 'utf8')),
  );
  return { caPem, certPem, keyPem };
}
