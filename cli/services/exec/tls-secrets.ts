// `--tls-secret [PORT=]NAME`: the workload's kubernetes.io/tls Secret, read with the user's own credentials in the
// target's namespace, so the agent can end the TLS of a filtered port (agent/incoming/tls-terminate.ts). Its PEMs go
// to the agent on the session's tunnel only (subscribe.tls): never in a pod spec, a log line, an event or a file.
import { CoreV1Api, type KubeConfig } from '@kubernetes/client-node';
import { UserError } from '../../../shared/errors.js';
import { MAX_TLS_PEM_CHARS, type TlsMaterial } from '../../../shared/protocol.js';
import { apiErrorCode, mapApiError } from '../../kube/errors.js';
import { parseTlsSecretSpec, type TlsSecretSpec } from '../../config/tls-secret-spec.js';

/**
 * Which Secret each filtered port uses: a `PORT=NAME` for its port, else the one without a port. A port named that
 * the session does not steal is refused, and so is a port given twice.
 */
export function secretsByPort(specs: readonly TlsSecretSpec[], ports: readonly number[]): Map<number, string> {
  const all = specs.filter((s) => s.port === undefined);
  if (all.length > 1)
    throw new UserError(
      `--tls-secret names ${all.map((s) => s.name).join(' and ')} for every port`,
      'give one --tls-secret NAME, and PORT=NAME for the ports that use another Secret',
    );
  const byPort = new Map<number, string>();
  for (const spec of specs) {
    if (spec.port === undefined) continue;
    if (!ports.includes(spec.port))
      throw new UserError(
        `--tls-secret ${spec.port}=${spec.name}: port ${spec.port} is not among the session's ports ` +
          `(${ports.join(', ')})`,
        'name one of them, or add it with -p',
      );
    if (byPort.has(spec.port))
      throw new UserError(`--tls-secret names two Secrets for port ${spec.port}`, 'give one Secret per port');
    byPort.set(spec.port, spec.name);
  }
  for (const port of ports) if (!byPort.has(port) && all[0]) byPort.set(port, all[0].name);
  return byPort;
}

function pemOf(data: Record<string, string> | undefined, key: string): string | undefined {
  const value = data?.[key];
  return value === undefined ? undefined : Buffer.from(value, 'base64').toString('utf8');
}

/** Reads one Secret as TLS material; each way it can fail is one line naming the fix (and never its content). */
export async function readTlsSecret(kc: KubeConfig, namespace: string, name: string): Promise<TlsMaterial> {
  let secret: Awaited<ReturnType<CoreV1Api['readNamespacedSecret']>>;
  try {
    secret = await kc.makeApiClient(CoreV1Api).readNamespacedSecret({ name, namespace });
  } catch (err) {
    const code = apiErrorCode(err);
    if (code === 403)
      throw new UserError(
        `cannot read Secret ${name} in namespace ${namespace} for --tls-secret: your user may not get it (403)`,
        `ask for "get" on secrets/${name} in ${namespace} (kubectl auth can-i get secret/${name} -n ${namespace}), ` +
          'or name a Secret you can read',
      );
    if (code === 404)
      throw new UserError(
        `Secret ${name} not found in namespace ${namespace} (--tls-secret)`,
        `name the workload's kubernetes.io/tls Secret (kubectl get secrets -n ${namespace} ` +
          '--field-selector type=kubernetes.io/tls)',
      );
    throw mapApiError(err, {
      action: `read Secret ${name} for --tls-secret`,
      verb: 'get',
      resource: 'secrets',
      namespace,
      name,
    });
  }
  const cert = pemOf(secret.data, 'tls.crt');
  const key = pemOf(secret.data, 'tls.key');
  const ca = pemOf(secret.data, 'ca.crt');
  if (!cert || !key)
    throw new UserError(
      `Secret ${name} in namespace ${namespace} has no ${cert ? 'tls.key' : 'tls.crt'} ` +
        `(its type: ${secret.type ?? 'none'})`,
      'name a kubernetes.io/tls Secret (tls.crt and tls.key), the one the workload serves with',
    );
  if ([cert, key, ca ?? ''].some((pem) => pem.length > MAX_TLS_PEM_CHARS))
    throw new UserError(
      `Secret ${name} in namespace ${namespace} holds a PEM over ${MAX_TLS_PEM_CHARS / 1024} KiB`,
      "name the Secret that holds the workload's certificate chain and key only",
    );
  return { cert, key, ...(ca ? { ca } : {}) };
}

/** The TLS material of each filtered port the specs name, each Secret read once. */
export async function readTlsSecrets(
  kc: KubeConfig,
  namespace: string,
  specs: readonly string[],
  ports: readonly number[],
): Promise<Map<number, TlsMaterial>> {
  const byPort = secretsByPort(specs.map(parseTlsSecretSpec), ports);
  const names = [...new Set(byPort.values())];
  const read = new Map(await Promise.all(names.map(async (n) => [n, await readTlsSecret(kc, namespace, n)] as const)));
  return new Map([...byPort].map(([port, name]) => [port, read.get(name)!]));
}
