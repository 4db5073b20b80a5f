// What a namespace holds that a target can name, as `devop ls` shows it: deployments, statefulsets (none when the
// cluster does not serve them), pods other than devop's own agents, and the APIServices and webhook configurations
// whose Service is in the namespace (cluster-scoped: none when the user may not list them).
import {
  AdmissionregistrationV1Api,
  ApiregistrationV1Api,
  AppsV1Api,
  CoreV1Api,
  type KubeConfig,
  type V1Deployment,
  type V1Pod,
  type V1Service,
  type V1StatefulSet,
} from '@kubernetes/client-node';
import { apiCall, apiErrorCode } from './errors.js';
import { isAgentPod } from './targets/pod.js';

/** An APIService or a webhook configuration served by a Service of the namespace. */
export interface ExtensionWorkload {
  /** What to pass to -t: apiservice/NAME, validatingwebhookconfiguration/NAME or mutatingwebhookconfiguration/NAME. */
  target: string;
  kind: 'apiservice' | 'webhook';
  service: V1Service;
  /** The Service port the API server calls (APIServices name one, 443 by default; webhooks too). */
  servicePort: number;
}

export interface Workloads {
  deployments: V1Deployment[];
  statefulsets: V1StatefulSet[];
  pods: V1Pod[];
  extensions: ExtensionWorkload[];
}

/** kube-apiserver's default port for an APIService's or a webhook's Service. */
const DEFAULT_SERVICE_PORT = 443;

/**
 * A list that only adds extension targets to `devop ls`: a user who may not list these (cluster-scoped ones, for
 * many), or a cluster that does not serve the API, leaves nothing to show; any other failure is one.
 */
async function optionalList<T>(
  resource: string,
  list: () => Promise<{ items: T[] }>,
  namespace?: string,
): Promise<T[]> {
  try {
    return (await list()).items;
  } catch (err) {
    const code = apiErrorCode(err);
    if (code === 403 || code === 404) return [];
    return apiCall({ action: `list ${resource}`, verb: 'list', resource, namespace }, () => Promise.reject(err));
  }
}

async function listExtensions(kc: KubeConfig, namespace: string, services: V1Service[]): Promise<ExtensionWorkload[]> {
  const apiregistration = kc.makeApiClient(ApiregistrationV1Api);
  const admission = kc.makeApiClient(AdmissionregistrationV1Api);
  const [apiServices, validating, mutating] = await Promise.all([
    optionalList('apiservices.apiregistration.k8s.io', () => apiregistration.listAPIService()),
    optionalList('validatingwebhookconfigurations.admissionregistration.k8s.io', () =>
      admission.listValidatingWebhookConfiguration(),
    ),
    optionalList('mutatingwebhookconfigurations.admissionregistration.k8s.io', () =>
      admission.listMutatingWebhookConfiguration(),
    ),
  ]);
  const served = (ref: { namespace?: string; name?: string; port?: number } | undefined) => {
    const service = ref?.namespace === namespace ? services.find((s) => s.metadata?.name === ref?.name) : undefined;
    return service ? { service, servicePort: ref?.port ?? DEFAULT_SERVICE_PORT } : undefined;
  };
  const found: ExtensionWorkload[] = [];
  for (const a of apiServices) {
    const backend = served(a.spec?.service);
    if (backend) found.push({ target: `apiservice/${a.metadata?.name}`, kind: 'apiservice', ...backend });
  }
  const configurations = [
    ...validating.map((c) => ({ kind: 'validatingwebhookconfiguration', c })),
    ...mutating.map((c) => ({ kind: 'mutatingwebhookconfiguration', c })),
  ];
  for (const { kind, c } of configurations) {
    // A configuration is one target; it is listed under the Service its first webhook in this namespace calls.
    const backend = (c.webhooks ?? []).map((w) => served(w.clientConfig.service)).find(Boolean);
    if (backend) found.push({ target: `${kind}/${c.metadata?.name}`, kind: 'webhook', ...backend });
  }
  return found;
}

export async function listWorkloads(kc: KubeConfig, namespace: string): Promise<Workloads> {
  const core = kc.makeApiClient(CoreV1Api);
  const apps = kc.makeApiClient(AppsV1Api);
  const ctx = (resource: string) => ({ action: `list ${resource}`, verb: 'list', resource, namespace });
  const [deployments, statefulsets, pods, extensions] = await Promise.all([
    apiCall(ctx('deployments.apps'), () => apps.listNamespacedDeployment({ namespace })),
    apps.listNamespacedStatefulSet({ namespace }).catch((err: unknown) => {
      if (apiErrorCode(err) === 404) return { items: [] };
      return apiCall(ctx('statefulsets.apps'), () => Promise.reject(err));
    }),
    apiCall(ctx('pods'), () => core.listNamespacedPod({ namespace })),
    optionalList('services', () => core.listNamespacedService({ namespace }), namespace).then((services) =>
      services.length > 0 ? listExtensions(kc, namespace, services) : [],
    ),
  ]);
  return {
    deployments: deployments.items,
    statefulsets: statefulsets.items,
    pods: pods.items.filter((pod) => !isAgentPod(pod)),
    extensions,
  };
}
