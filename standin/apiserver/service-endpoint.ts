// How the API server reaches a Service's pods (APIService backends, admission webhooks): a ready endpoint of the
// Service port, dialed from the API server's advertised address, as kube-apiserver's connections leave its node.
import { isIPv4 } from 'node:net';
import type { K8sObject } from './errors.js';
import type { Objects } from './objects.js';

export interface ServiceEndpoint {
  host: string;
  port: number;
  /** Where the connection comes from: the API server's own address, not whatever the host's routing picks. */
  localAddress?: string;
}

export interface ServiceEndpointError {
  error: string;
  reason: 'ServiceNotFound' | 'ServicePortError' | 'MissingEndpoints';
}

const isLoopback = (ip: string) => ip.startsWith('127.');

/**
 * The source address of connections to `host`: the address the API server advertises (the `kubernetes` Endpoints), as
 * a kube-apiserver's connections leave its control-plane node from that node's IP. Without it the host would pick the
 * bridge's address, the node IP — which the agent treats as kubelet probes. Loopback on either side needs none.
 */
export function sourceFor(objects: Objects, host: string): string | undefined {
  const ip = objects.store.get('/endpoints', 'default', 'kubernetes')?.subsets?.[0]?.addresses?.[0]?.ip;
  if (typeof ip !== 'string' || !isIPv4(ip) || isLoopback(ip) || isLoopback(host)) return undefined;
  return ip;
}

/**
 * A ready endpoint (pod IP and target port) of `port` of the Service. `pick` chooses among the ready addresses (the
 * aggregator takes the first; webhooks spread like the Service's ClusterIP would).
 */
export function serviceEndpoint(
  objects: Objects,
  ref: { namespace: string; name: string; port: number },
  pick: (n: number) => number = () => 0,
): ServiceEndpoint | ServiceEndpointError {
  const svc = objects.store.get('/services', ref.namespace, ref.name);
  if (!svc) return { reason: 'ServiceNotFound', error: `service/${ref.name} in "${ref.namespace}" is not present` };
  const svcPort = (svc.spec?.ports ?? []).find((p: K8sObject) => p.port === ref.port);
  if (!svcPort)
    return {
      reason: 'ServicePortError',
      error: `service/${ref.name} in "${ref.namespace}" is not listening on port ${ref.port}`,
    };
  const ep = objects.store.get('/endpoints', ref.namespace, ref.name);
  for (const subset of ep?.subsets ?? []) {
    const epPort = (subset.ports ?? []).find((p: K8sObject) => (svcPort.name ? p.name === svcPort.name : true));
    const addrs: K8sObject[] = subset.addresses ?? [];
    if (epPort && addrs.length > 0) {
      const addr = addrs[Math.min(addrs.length - 1, pick(addrs.length))];
      return { host: addr.ip, port: epPort.port, localAddress: sourceFor(objects, addr.ip) };
    }
  }
  return {
    reason: 'MissingEndpoints',
    error:
      `endpoints for service/${ref.name} in "${ref.namespace}" have no addresses with port name ` +
      `"${svcPort.name ?? ''}"`,
  };
}
