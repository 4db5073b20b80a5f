// The webhook's serving certificate: one self-signed certificate for every replica (and for a local copy run under
// devop), kept in a Secret; the ValidatingWebhookConfiguration's caBundle is set to it, so kube-apiserver trusts it.
import { AdmissionregistrationV1Api, CoreV1Api, type KubeConfig } from '@kubernetes/client-node';
import { selfSignedCert } from '../../farm-operator/src/cert.js';

export interface WebhookTlsOptions {
  kubeConfig: KubeConfig;
  /** Namespace of the Secret and the webhook's Service. */
  namespace: string;
  /** The Service kube-apiserver calls: the certificate names `<service>.<namespace>.svc`. */
  service: string;
  secret: string;
  /** The ValidatingWebhookConfiguration whose webhooks get the caBundle. */
  configuration: string;
}

function statusCode(err: unknown): number | undefined {
  const code = (err as { code?: unknown } | undefined)?.code;
  return typeof code === 'number' ? code : undefined;
}

/** The names kube-apiserver (and anything else in the cluster) may use for the Service. */
export function serviceNames(service: string, namespace: string): string[] {
  return [
    service,
    `${service}.${namespace}`,
    `${service}.${namespace}.svc`,
    `${service}.${namespace}.svc.cluster.local`,
  ];
}

/** The Secret's certificate, made and stored by whichever replica comes first (the others read it). */
async function certificateSecret(core: CoreV1Api, o: WebhookTlsOptions): Promise<{ key: string; cert: string }> {
  const read = async () => {
    const s = await core.readNamespacedSecret({ name: o.secret, namespace: o.namespace });
    const decode = (k: string) => Buffer.from(s.data?.[k] ?? '', 'base64').toString('utf8');
    return { cert: decode('tls.crt'), key: decode('tls.key') };
  };
  try {
    return await read();
  } catch (err) {
    if (statusCode(err) !== 404) throw err;
  }
  const made = selfSignedCert({
    commonName: `${o.service}.${o.namespace}.svc`,
    altNames: serviceNames(o.service, o.namespace),
  });
  try {
    await core.createNamespacedSecret({
      namespace: o.namespace,
      body: {
        metadata: { name: o.secret },
        type: 'kubernetes.io/tls',
        data: {
          'tls.crt': Buffer.from(made.cert).toString('base64'),
          'tls.key': Buffer.from(made.key).toString('base64'),
        },
      },
    });
    return made;
  } catch (err) {
    if (statusCode(err) === 409) return read(); // another replica was first: use its certificate
    throw err;
  }
}

/** Points every webhook of the configuration at the certificate (a no-op when it already is). */
async function trustInConfiguration(api: AdmissionregistrationV1Api, o: WebhookTlsOptions, cert: string) {
  const caBundle = Buffer.from(cert).toString('base64');
  for (let attempt = 0; ; attempt++) {
    const cfg = await api.readValidatingWebhookConfiguration({ name: o.configuration });
    const webhooks = cfg.webhooks ?? [];
    if (webhooks.every((w) => w.clientConfig.caBundle === caBundle)) return;
    for (const w of webhooks) w.clientConfig.caBundle = caBundle;
    try {
      await api.replaceValidatingWebhookConfiguration({ name: o.configuration, body: cfg });
      return;
    } catch (err) {
      if (statusCode(err) !== 409 || attempt >= 5) throw err; // a concurrent replica wrote first: read again
    }
  }
}

/** The key and certificate to serve, once kube-apiserver trusts them. */
export async function webhookTls(o: WebhookTlsOptions): Promise<{ key: string; cert: string }> {
  const tls = await certificateSecret(o.kubeConfig.makeApiClient(CoreV1Api), o);
  await trustInConfiguration(o.kubeConfig.makeApiClient(AdmissionregistrationV1Api), o, tls.cert);
  return tls;
}
