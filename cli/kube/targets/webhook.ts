// validatingwebhookconfiguration/NAME[/webhook/NAME] and mutatingwebhookconfiguration/…: the pods behind the webhooks'
// Service (every Ready one is used, as kube-apiserver may call any), the Service's targetPort, and each webhook's
// timeoutSeconds (a request the local command does not answer in time is answered by the pod).
import type { V1MutatingWebhook, V1ValidatingWebhook } from '@kubernetes/client-node';
import { UserError } from '../../../shared/errors.js';
import type { WebhookKind } from '../../../shared/target.js';
import type { KindClients, KindResolver, WebhookInfo } from './resolver.js';

/** kube-apiserver's default timeoutSeconds (admissionregistration.k8s.io/v1). */
export const DEFAULT_WEBHOOK_TIMEOUT_SECONDS = 10;

/**
 * What the pod keeps of a webhook's timeout to answer in the local command's place: two seconds, or half of a timeout
 * under four. It answers in milliseconds; the rest covers a new connection, its TLS handshake and a busy node (with one
 * second, a clean-clone CI run on two loaded cores saw the API server's 5 s run out before the pod's answer came).
 */
export const POD_ANSWER_MARGIN_MS = 2000;

/** How long the local command has to start answering before the pod answers instead: the shortest timeout − margin. */
export function answerDeadlineMs(webhooks: readonly WebhookInfo[]): number {
  const timeoutMs = Math.min(...webhooks.map((w) => w.timeoutSeconds)) * 1000;
  return Math.round(timeoutMs - Math.min(POD_ANSWER_MARGIN_MS, timeoutMs / 2));
}

type Webhook = V1ValidatingWebhook | V1MutatingWebhook;

async function readWebhooks({ admission }: KindClients, kind: WebhookKind, name: string): Promise<Webhook[]> {
  const cfg =
    kind === 'validatingwebhookconfiguration'
      ? await admission.readValidatingWebhookConfiguration({ name })
      : await admission.readMutatingWebhookConfiguration({ name });
  return cfg.webhooks ?? [];
}

/** The webhooks a target names: all of the configuration's, or the one after /webhook/. */
function chosen(all: Webhook[], kind: WebhookKind, name: string, webhook: string | undefined): Webhook[] {
  const names = all.map((w) => w.name).join(', ');
  if (all.length === 0)
    throw new UserError(`${kind} "${name}" has no webhooks`, 'add a webhook to it, or pick another target');
  if (!webhook) return all;
  const found = all.find((w) => w.name === webhook);
  if (!found)
    throw new UserError(
      `${kind} "${name}" has no webhook "${webhook}" (webhooks: ${names})`,
      'pass one of the listed names after /webhook/',
    );
  return [found];
}

function webhookResolver(kind: WebhookKind, plural: string): KindResolver {
  return {
    plural,
    resource: `${plural}.admissionregistration.k8s.io`,
    clusterScoped: true,
    async read(clients, name, _namespace, ref) {
      const webhooks = chosen(await readWebhooks(clients, kind, name), kind, name, ref?.webhook);
      const url = webhooks.find((w) => !w.clientConfig.service);
      if (url)
        throw new UserError(
          `webhook "${url.name}" of ${kind} "${name}" calls a URL, not a Service: devop cannot take its requests`,
          'target a webhook that calls a Service (clientConfig.service), or the workload that serves the URL',
        );
      const services = new Set(
        webhooks.map((w) => `${w.clientConfig.service?.namespace}/${w.clientConfig.service?.name}`),
      );
      if (services.size > 1)
        throw new UserError(
          `the webhooks of ${kind} "${name}" call different Services (${[...services].join(', ')})`,
          `pick one webhook with ${kind}/${name}/webhook/NAME`,
        );
      const ref0 = webhooks[0].clientConfig.service!;
      const port = ref0.port ?? 443;
      const svc = await clients.core.readNamespacedService({ name: ref0.name, namespace: ref0.namespace });
      const svcPort = (svc.spec?.ports ?? []).find((p) => p.port === port);
      if (!svcPort)
        throw new UserError(
          `service ${ref0.namespace}/${ref0.name} has no port ${port}, which the webhooks of ${kind} "${name}" call`,
          'fix the Service or the webhook configuration (clientConfig.service.port)',
        );
      const selector = svc.spec?.selector;
      if (!selector || Object.keys(selector).length === 0)
        throw new UserError(
          `service ${ref0.namespace}/${ref0.name} has no selector: devop cannot tell which pods serve the webhooks`,
          'give the Service a selector, or target the pods with deploy/NAME -p PORT',
        );
      const info: WebhookInfo[] = webhooks.map((w) => ({
        name: w.name,
        timeoutSeconds: w.timeoutSeconds ?? DEFAULT_WEBHOOK_TIMEOUT_SECONDS,
      }));
      return {
        kind: 'selector',
        selector: { matchLabels: selector },
        namespace: ref0.namespace,
        targetPort: svcPort.targetPort ?? port,
        webhooks: info,
      };
    },
    async names({ admission }) {
      const list =
        kind === 'validatingwebhookconfiguration'
          ? await admission.listValidatingWebhookConfiguration()
          : await admission.listMutatingWebhookConfiguration();
      return list.items.map((c) => c.metadata?.name ?? '');
    },
  };
}

export const validatingWebhookResolver = webhookResolver(
  'validatingwebhookconfiguration',
  'validatingwebhookconfigurations',
);
export const mutatingWebhookResolver = webhookResolver('mutatingwebhookconfiguration', 'mutatingwebhookconfigurations');
