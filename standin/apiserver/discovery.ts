// Discovery documents (/version, /api, /apis, group versions).
import { createHash } from 'node:crypto';
import type { K8sObject } from './errors.js';
import type { Catalog } from './catalog.js';
import { apiVersionOf, type ResourceType } from './resources.js';

/** The Kubernetes version the stand-in reports: within one minor of every kubectl it is tested with (1.31–1.33). */
export const SERVER_VERSION = {
  major: '1',
  minor: '32',
  gitVersion: 'v1.32.0',
  gitCommit: '0000000000000000000000000000000000000000',
  gitTreeState: 'clean',
  buildDate: '2024-12-11T18:04:20Z',
  goVersion: 'go1.23.3',
  compiler: 'gc',
  platform: 'linux/amd64',
};

export interface AggregatedGroup {
  group: string;
  version: string;
}

export function apiVersions(serverAddress: string): K8sObject {
  return {
    kind: 'APIVersions',
    versions: ['v1'],
    serverAddressByClientCIDRs: [{ clientCIDR: '0.0.0.0/0', serverAddress }],
  };
}

export function apiGroupList(catalog: Catalog, aggregated: AggregatedGroup[]): K8sObject {
  const groups = new Map<string, string[]>();
  for (const [g, vs] of catalog.groups()) if (g !== '') groups.set(g, [...vs]);
  for (const a of aggregated) {
    const vs = groups.get(a.group) ?? [];
    if (!vs.includes(a.version)) vs.push(a.version);
    groups.set(a.group, vs);
  }
  return {
    kind: 'APIGroupList',
    apiVersion: 'v1',
    groups: [...groups].map(([name, vs]) => ({
      name,
      versions: vs.map((v) => ({ groupVersion: `${name}/${v}`, version: v })),
      preferredVersion: { groupVersion: `${name}/${vs[0]}`, version: vs[0] },
    })),
  };
}

export function apiGroup(catalog: Catalog, group: string, aggregated: AggregatedGroup[]): K8sObject | undefined {
  const list = apiGroupList(catalog, aggregated).groups.find((g: K8sObject) => g.name === group);
  return list ? { kind: 'APIGroup', apiVersion: 'v1', ...list } : undefined;
}

export function apiResourceList(types: ResourceType[], groupVersion: string): K8sObject {
  const resources: K8sObject[] = [];
  for (const t of types) {
    const r: K8sObject = {
      name: t.resource,
      singularName: t.singular,
      namespaced: t.namespaced,
      kind: t.kind,
      verbs: t.verbs,
    };
    if (t.shortNames.length) r.shortNames = t.shortNames;
    if (t.categories.length) r.categories = t.categories;
    r.storageVersionHash = createHash('sha256')
      .update(`${apiVersionOf(t)}/${t.kind}`)
      .digest('base64')
      .slice(0, 11);
    resources.push(r);
    for (const s of t.subresources) {
      const sr: K8sObject = {
        name: `${t.resource}/${s.name}`,
        singularName: '',
        namespaced: t.namespaced,
        kind: s.kind,
        verbs: s.verbs,
      };
      if (s.group) sr.group = s.group;
      if (s.version) sr.version = s.version;
      resources.push(sr);
    }
  }
  return { kind: 'APIResourceList', apiVersion: 'v1', groupVersion, resources };
}
