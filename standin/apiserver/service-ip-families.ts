// A new Service's IP families and ClusterIPs on a single- or dual-stack cluster, as kube-apiserver sets them on create
// (kubernetes pkg/registry/core/service/storage/alloc.go: initIPFamilyFields, allocClusterIPs): the policy defaults to
// SingleStack (RequireDualStack for a headless Service without a selector), families come from the given ClusterIPs,
// then the cluster's default family, and a Prefer/RequireDualStack Service on a dual-stack cluster gets the other one
// too; a family the cluster does not serve, or dual-stack demanded of a single-stack cluster, is 422.
import { isIPv6 } from 'node:net';
import { invalid, type K8sObject } from './errors.js';

export type IPFamily = 'IPv4' | 'IPv6';

export interface ServiceIPs {
  /** The cluster's Service families, the default (primary) one first. */
  families: IPFamily[];
  /** A free ClusterIP of that family. */
  allocate(family: IPFamily): string;
}

const familyOf = (ip: string): IPFamily => (isIPv6(ip) ? 'IPv6' : 'IPv4');
const other = (f: IPFamily): IPFamily => (f === 'IPv4' ? 'IPv6' : 'IPv4');

/** Sets spec.ipFamilyPolicy, ipFamilies, clusterIPs and clusterIP of a Service being created (spec mutated). */
export function initServiceIPs(name: string, spec: K8sObject, cluster: ServiceIPs): void {
  if (spec.type === 'ExternalName') return;
  const fail = (field: string, message: string) => invalid('Service', '', name, [{ field, message }]);
  const headlessSelectorless = spec.clusterIP === 'None' && Object.keys(spec.selector ?? {}).length === 0;
  spec.ipFamilyPolicy ??= headlessSelectorless ? 'RequireDualStack' : 'SingleStack';
  if (spec.clusterIP && !spec.clusterIPs) spec.clusterIPs = [spec.clusterIP];
  const clusterIPs: string[] = (spec.clusterIPs ?? []).filter((ip: string) => ip !== '');
  const families: IPFamily[] = [...(spec.ipFamilies ?? [])];
  const policy = `Invalid value: "${spec.ipFamilyPolicy}": `;
  if (spec.ipFamilyPolicy === 'SingleStack' && clusterIPs.length === 2)
    throw fail(
      'spec.ipFamilyPolicy',
      `${policy}must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified`,
    );
  if (spec.ipFamilyPolicy === 'SingleStack' && families.length === 2)
    throw fail(
      'spec.ipFamilyPolicy',
      `${policy}must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified`,
    );
  for (const [i, ip] of clusterIPs.entries()) {
    if (ip === 'None') break;
    if (i < families.length) continue;
    if (!cluster.families.includes(familyOf(ip)))
      throw fail(
        `spec.clusterIPs[${i}]`,
        `Invalid value: ${JSON.stringify(clusterIPs)}: ${familyOf(ip)} is not configured on this cluster`,
      );
    families.push(familyOf(ip));
  }
  if (headlessSelectorless) {
    if (families.length === 0) families.push(cluster.families[0]);
    if (families.length < 2 && spec.ipFamilyPolicy !== 'SingleStack') families.push(other(families[0]));
    spec.ipFamilies = families;
    return;
  }
  if (spec.ipFamilyPolicy === 'RequireDualStack' && cluster.families.length < 2)
    throw fail('spec.ipFamilyPolicy', `${policy}this cluster is not configured for dual-stack services`);
  for (const [i, f] of families.entries())
    if (!cluster.families.includes(f))
      throw fail(`spec.ipFamilies[${i}]`, `Invalid value: "${f}": not configured on this cluster`);
  if (families.length === 0) families.push(cluster.families[0]);
  if (spec.ipFamilyPolicy !== 'SingleStack' && families.length === 1 && cluster.families.length === 2)
    families.push(other(families[0]));
  spec.ipFamilies = families;
  if (clusterIPs[0] === 'None') {
    spec.clusterIPs = ['None'];
    spec.clusterIP = 'None';
    return;
  }
  spec.clusterIPs = families.map((f, i) => clusterIPs[i] ?? cluster.allocate(f));
  spec.clusterIP = spec.clusterIPs[0];
}
