// Discovery documents (/version, /api, /apis, group versions) and the OpenAPI v3 index kubectl reads before apply.
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

function gvPath(group: string, version: string): string {
  return group ? `apis/${group}/${version}` : `api/${version}`;
}

/** Query parameters that tell kubectl the server validates fields itself (so it sends fieldValidation=Strict). */
const WRITE_PARAMS = [
  { name: 'dryRun', in: 'query', schema: { type: 'string', uniqueItems: true } },
  { name: 'fieldManager', in: 'query', schema: { type: 'string', uniqueItems: true } },
  { name: 'fieldValidation', in: 'query', schema: { type: 'string', uniqueItems: true } },
];

function openapiGroupVersionDoc(types: ResourceType[]): K8sObject {
  const paths: K8sObject = {};
  const schemas: K8sObject = {};
  for (const t of types) {
    const gvk = { group: t.group, version: t.version, kind: t.kind };
    const base = `/${gvPath(t.group, t.version)}${t.namespaced ? '/namespaces/{namespace}' : ''}/${t.resource}`;
    const ref = { $ref: `#/components/schemas/${schemaName(t)}` };
    const json = { 'application/json': { schema: ref } };
    const op = (action: string, extra: K8sObject = {}) => ({
      operationId: `${action}${t.kind}`,
      'x-kubernetes-action': action,
      'x-kubernetes-group-version-kind': gvk,
      responses: { '200': { description: 'OK', content: json } },
      ...extra,
    });
    if (t.verbs.includes('list') || t.verbs.includes('create')) {
      paths[base] = {
        ...(t.verbs.includes('list') ? { get: op('list') } : {}),
        ...(t.verbs.includes('create')
          ? { post: op('post', { parameters: WRITE_PARAMS, requestBody: { content: json, required: true } }) }
          : {}),
      };
    }
    if (t.verbs.includes('get')) {
      paths[`${base}/{name}`] = {
        get: op('get'),
        put: op('put', { parameters: WRITE_PARAMS, requestBody: { content: json, required: true } }),
        patch: op('patch', {
          parameters: [...WRITE_PARAMS, { name: 'force', in: 'query', schema: { type: 'boolean', uniqueItems: true } }],
          // No strategic-merge-patch entry: kubectl then takes merge keys from its compiled-in types, which are exact.
          requestBody: {
            content: {
              'application/json-patch+json': { schema: { type: 'object' } },
              'application/merge-patch+json': { schema: { type: 'object' } },
              'application/apply-patch+yaml': { schema: { type: 'object' } },
            },
            required: true,
          },
        }),
        delete: op('delete'),
      };
    }
    schemas[schemaName(t)] = {
      type: 'object',
      'x-kubernetes-group-version-kind': [gvk],
      'x-kubernetes-preserve-unknown-fields': true,
    };
  }
  return {
    openapi: '3.0.0',
    info: { title: 'Kubernetes', version: SERVER_VERSION.gitVersion },
    paths,
    components: { schemas },
  };
}

function schemaName(t: ResourceType): string {
  const g =
    t.group === ''
      ? 'io.k8s.api.core'
      : t.custom
        ? t.group.split('.').reverse().join('.')
        : `io.k8s.api.${t.group.split('.')[0]}`;
  return `${g}.${t.version}.${t.kind}`;
}

/** `/openapi/v3` index and the per-group-version documents it points at. */
export function openapiV3(catalog: Catalog): { index: K8sObject; docs: Map<string, K8sObject> } {
  const byGv = new Map<string, ResourceType[]>();
  for (const t of catalog.all()) {
    const p = gvPath(t.group, t.version);
    byGv.set(p, [...(byGv.get(p) ?? []), t]);
  }
  const docs = new Map<string, K8sObject>();
  const paths: K8sObject = {};
  for (const [p, types] of byGv) {
    const doc = openapiGroupVersionDoc(types);
    docs.set(p, doc);
    const hash = createHash('sha512').update(JSON.stringify(doc)).digest('hex').slice(0, 128).toUpperCase();
    paths[p] = { serverRelativeURL: `/openapi/v3/${p}?hash=${hash}` };
  }
  return { index: { paths }, docs };
}
