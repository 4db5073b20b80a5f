// Endpoints from Services and their selected pods (ready → addresses, not ready → notReadyAddresses; every pod, a
// terminating one too, → addresses when the Service sets spec.publishNotReadyAddresses). The addresses are
// of the Service's primary IP family, as the endpoints controller writes them on a dual-stack cluster (kubernetes
// pkg/controller/endpoint/endpoints_controller.go, podToEndpointAddressForService: the pod IP of ipFamilies[0]), and
// carry the pod's spec.hostname when its spec.subdomain is the Service's name (syncService, ShouldSetHostname in
// staging/src/k8s.io/endpointslice/util/controller_utils.go).
import { isIPv6 } from 'node:net';
import type { K8sObject } from '../errors.js';
import type { Objects } from '../objects.js';
import { mapSelectorMatcher } from '../selectors.js';
import { isPodReady, type Controller } from './loop.js';

function resolveTargetPort(pod: K8sObject, target: unknown): number | undefined {
  if (typeof target === 'number') return target;
  if (typeof target === 'string' && /^\d+$/.test(target)) return Number(target);
  for (const c of pod.spec?.containers ?? [])
    for (const p of c.ports ?? []) if (p.name === target) return p.containerPort;
  return undefined;
}

/** The pod's address of the Service's primary family, or undefined when it has none of that family. */
function podAddressFor(svc: K8sObject, pod: K8sObject): string | undefined {
  const six = svc.spec?.ipFamilies?.[0] === 'IPv6';
  const ips: string[] = (pod.status?.podIPs ?? []).map((p: K8sObject) => p.ip);
  return ips.find((ip) => isIPv6(ip) === six) ?? (six ? undefined : pod.status?.podIP);
}

function endpointsFor(svc: K8sObject, pods: K8sObject[]): K8sObject[] {
  const subsets = new Map<string, K8sObject>();
  for (const pod of pods) {
    const ip = podAddressFor(svc, pod);
    if (!ip) continue;
    const ports = (svc.spec.ports ?? []).map((sp: K8sObject) => ({
      name: sp.name,
      port: resolveTargetPort(pod, sp.targetPort ?? sp.port),
      protocol: sp.protocol ?? 'TCP',
    }));
    if (ports.some((p: K8sObject) => p.port === undefined)) continue;
    for (const p of ports) if (p.name === undefined) delete p.name;
    const key = JSON.stringify(ports);
    const subset = subsets.get(key) ?? { addresses: [], notReadyAddresses: [], ports };
    const addr = {
      ip,
      // The name CoreDNS answers at <hostname>.<svc>.<ns>.svc (endpointslice util's ShouldSetHostname: the pod names
      // this Service as its subdomain; a StatefulSet's pods do, with hostname = the pod's name).
      ...(pod.spec.hostname && pod.spec.subdomain === svc.metadata.name ? { hostname: pod.spec.hostname } : {}),
      nodeName: pod.spec.nodeName,
      targetRef: { kind: 'Pod', namespace: pod.metadata.namespace, name: pod.metadata.name, uid: pod.metadata.uid },
    };
    // publishNotReadyAddresses: the address counts as ready whatever the pod's readiness (addEndpointSubset's
    // tolerateUnreadyEndpoints), so a StatefulSet's peers find each other by DNS before any of them is ready.
    (svc.spec.publishNotReadyAddresses || isPodReady(pod) ? subset.addresses : subset.notReadyAddresses).push(addr);
    subsets.set(key, subset);
  }
  return [...subsets.values()].map((s) => {
    const out: K8sObject = { ports: s.ports };
    if (s.addresses.length) out.addresses = s.addresses;
    if (s.notReadyAddresses.length) out.notReadyAddresses = s.notReadyAddresses;
    return out;
  });
}

export const endpointsController: Controller = {
  name: 'endpoints',
  watches: ['/services', '/pods', '/endpoints'],
  reconcile(objects: Objects) {
    const epType = objects.type('/endpoints');
    const services = objects.store.list('/services');
    for (const svc of services) {
      if (!svc.spec?.selector || Object.keys(svc.spec.selector).length === 0) continue;
      const ns = svc.metadata.namespace;
      const match = mapSelectorMatcher(svc.spec.selector);
      // ShouldPodBeInEndpoints (endpointslice util): not terminal, has an IP, and not terminating unless the Service
      // publishes not-ready addresses.
      const keepTerminating = svc.spec.publishNotReadyAddresses === true;
      const pods = objects.store
        .list('/pods', ns)
        .filter(
          (p) =>
            match(p) &&
            p.status?.podIP &&
            (keepTerminating || !p.metadata.deletionTimestamp) &&
            p.status?.phase !== 'Succeeded' &&
            p.status?.phase !== 'Failed',
        );
      const subsets = endpointsFor(svc, pods);
      const cur = objects.store.get('/endpoints', ns, svc.metadata.name);
      const labels = { ...(svc.metadata.labels ?? {}), 'endpoints.kubernetes.io/managed-by': 'endpoint-controller' };
      const body: K8sObject = {
        apiVersion: 'v1',
        kind: 'Endpoints',
        metadata: { name: svc.metadata.name, namespace: ns, labels },
        ...(subsets.length ? { subsets } : {}),
      };
      if (!cur) objects.create(epType, ns, body);
      else if (
        JSON.stringify(cur.subsets ?? []) !== JSON.stringify(subsets) ||
        JSON.stringify(cur.metadata.labels ?? {}) !== JSON.stringify(labels)
      ) {
        const next: K8sObject = { ...cur, metadata: { ...cur.metadata, labels } };
        if (subsets.length) next.subsets = subsets;
        else delete next.subsets;
        objects.update(epType, ns, svc.metadata.name, next);
      }
    }
    for (const ep of objects.store.list('/endpoints')) {
      if (ep.metadata.labels?.['endpoints.kubernetes.io/managed-by'] !== 'endpoint-controller') continue;
      const svc = services.find(
        (s) => s.metadata.namespace === ep.metadata.namespace && s.metadata.name === ep.metadata.name,
      );
      if (!svc?.spec?.selector) objects.delete(epType, ep.metadata.namespace, ep.metadata.name, {});
    }
  },
};
