// apiservice/NAME: an aggregated APIService → its Service → the Service's pods, on the Service's targetPort (where the
// API server's aggregator connects). APIServices are cluster-scoped: the pods are in the Service's namespace.
import type { V1APIService, V1Service } from '@kubernetes/client-node';
import { UserError } from '../../../shared/errors.js';
import { apiErrorCode } from '../errors.js';
import type { ExtensionBackend, KindClients, KindResolver } from './resolver.js';

/** The Service port an APIService names when it names none (apiregistration.k8s.io/v1's default). */
const DEFAULT_SERVICE_PORT = 443;

async function apiServiceNames({ apiregistration }: KindClients): Promise<string[]> {
  return (await apiregistration.listAPIService()).items
    .filter((a) => a.spec?.service)
    .map((a) => a.metadata?.name ?? '');
}

async function readAPIService(clients: KindClients, name: string): Promise<V1APIService> {
  try {
    return await clients.apiregistration.readAPIService({ name });
  } catch (err) {
    if (apiErrorCode(err) !== 404) throw err;
    const names = await apiServiceNames(clients).catch(() => undefined);
    const list =
      names === undefined
        ? ''
        : names.length === 0
          ? ' (the cluster has no APIService backed by a Service)'
          : ` (APIServices backed by a Service: ${names.slice(0, 20).join(', ')}${names.length > 20 ? ', …' : ''})`;
    throw new UserError(
      `apiservice "${name}" not found${list}`,
      'check the name: `kubectl get apiservices` lists them (VERSION.GROUP, e.g. v1alpha.farm.example.com)',
    );
  }
}

/** The Available condition, as the header and the ready event show it. */
export function availableOf(apiService: V1APIService): ExtensionBackend['available'] {
  const c = apiService.status?.conditions?.find((x) => x.type === 'Available');
  if (!c) return { status: 'Unknown' };
  return { status: c.status, ...(c.reason ? { reason: c.reason } : {}), ...(c.message ? { message: c.message } : {}) };
}

/** Reads the APIService and its Service; every way it cannot lead to pods is one line naming it. */
export async function readExtension(
  clients: KindClients,
  name: string,
): Promise<{ extension: ExtensionBackend; service: V1Service }> {
  const apiService = await readAPIService(clients, name);
  const ref = apiService.spec?.service;
  if (!ref?.name || !ref.namespace)
    throw new UserError(
      `apiservice "${name}" is served by the API server itself (it names no Service): no pod to take over`,
      'pick an APIService whose SERVICE column (`kubectl get apiservices`) names a Service',
    );
  let service: V1Service;
  try {
    service = await clients.core.readNamespacedService({ name: ref.name, namespace: ref.namespace });
  } catch (err) {
    if (apiErrorCode(err) !== 404) throw err;
    throw new UserError(
      `apiservice "${name}" names service ${ref.namespace}/${ref.name}, which does not exist`,
      'create the Service (or fix spec.service of the APIService)',
    );
  }
  const port = ref.port ?? DEFAULT_SERVICE_PORT;
  const servicePort = service.spec?.ports?.find((p) => p.port === port);
  if (!servicePort)
    throw new UserError(
      `service ${ref.namespace}/${ref.name} has no port ${port}, which apiservice "${name}" uses`,
      'add the port to the Service, or fix spec.service.port of the APIService',
    );
  return {
    service,
    extension: {
      kind: 'apiservice',
      name,
      service: { namespace: ref.namespace, name: ref.name, targetPort: servicePort.targetPort ?? servicePort.port },
      available: availableOf(apiService),
    },
  };
}

export const apiServiceResolver: KindResolver = {
  plural: 'apiservices',
  resource: 'apiservices.apiregistration.k8s.io',
  clusterScoped: true,
  async read(clients, name) {
    const { extension, service } = await readExtension(clients, name);
    const { namespace, name: serviceName } = extension.service;
    const matchLabels = service.spec?.selector;
    if (!matchLabels || Object.keys(matchLabels).length === 0)
      throw new UserError(
        `service ${namespace}/${serviceName} behind apiservice "${name}" has no selector, so no pods devop can find`,
        'target the pod that serves it with pod/NAME and -p PORT',
      );
    const { targetPort } = extension.service;
    return { kind: 'selector', selector: { matchLabels }, namespace, targetPort, extension };
  },
  names: apiServiceNames,
};
