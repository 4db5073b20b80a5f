// The resource catalog: built-in kinds the stand-in serves, plus custom resources from established CRDs.
import type { K8sObject } from './errors.js';

export interface Subresource {
  name: string;
  kind: string;
  verbs: string[];
  group?: string;
  version?: string;
}

export interface ResourceType {
  group: string;
  version: string;
  resource: string;
  kind: string;
  listKind: string;
  singular: string;
  namespaced: boolean;
  shortNames: string[];
  categories: string[];
  verbs: string[];
  subresources: Subresource[];
  /** True when a status subresource exists: updates of the main resource then leave status alone, and vice versa. */
  hasStatus: boolean;
  /** Spec changes bump metadata.generation (kinds with a spec/status split). */
  generation: boolean;
  /** For custom resources: the CRD's printer columns. */
  printerColumns?: {
    name: string;
    type: string;
    jsonPath: string;
    description?: string;
    priority?: number;
    format?: string;
  }[];
  custom?: boolean;
  /** For custom resources: the CRD version's openAPIV3Schema (published under /openapi, checked by fieldValidation). */
  schema?: K8sObject;
}

const ALL_VERBS = ['create', 'delete', 'deletecollection', 'get', 'list', 'patch', 'update', 'watch'];
const STATUS_VERBS = ['get', 'patch', 'update'];

function rt(
  group: string,
  version: string,
  resource: string,
  kind: string,
  opts: Partial<Omit<ResourceType, 'group' | 'version' | 'resource' | 'kind'>> = {},
): ResourceType {
  const subresources = opts.subresources ?? [];
  return {
    group,
    version,
    resource,
    kind,
    listKind: `${kind}List`,
    singular: opts.singular ?? kind.toLowerCase(),
    namespaced: opts.namespaced ?? true,
    shortNames: opts.shortNames ?? [],
    categories: opts.categories ?? [],
    verbs: opts.verbs ?? ALL_VERBS,
    subresources,
    hasStatus: opts.hasStatus ?? subresources.some((s) => s.name === 'status'),
    generation: opts.generation ?? false,
    printerColumns: opts.printerColumns,
    custom: opts.custom,
    schema: opts.schema,
  };
}

const status = (kind: string): Subresource => ({ name: 'status', kind, verbs: STATUS_VERBS });
const scale: Subresource = { name: 'scale', kind: 'Scale', verbs: STATUS_VERBS, group: 'autoscaling', version: 'v1' };

/** The built-in kinds, in discovery order. */
export function builtinResources(): ResourceType[] {
  return [
    rt('', 'v1', 'namespaces', 'Namespace', {
      namespaced: false,
      shortNames: ['ns'],
      verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'],
      subresources: [status('Namespace'), { name: 'finalize', kind: 'Namespace', verbs: ['update'] }],
    }),
    rt('', 'v1', 'pods', 'Pod', {
      shortNames: ['po'],
      categories: ['all'],
      subresources: [
        status('Pod'),
        { name: 'log', kind: 'Pod', verbs: ['get'] },
        { name: 'exec', kind: 'PodExecOptions', verbs: ['create', 'get'] },
        { name: 'attach', kind: 'PodAttachOptions', verbs: ['create', 'get'] },
        { name: 'portforward', kind: 'PodPortForwardOptions', verbs: ['create', 'get'] },
        { name: 'ephemeralcontainers', kind: 'Pod', verbs: STATUS_VERBS },
        { name: 'binding', kind: 'Binding', verbs: ['create'] },
        { name: 'eviction', kind: 'Eviction', verbs: ['create'], group: 'policy', version: 'v1' },
      ],
    }),
    rt('', 'v1', 'services', 'Service', {
      shortNames: ['svc'],
      categories: ['all'],
      verbs: ALL_VERBS,
      subresources: [status('Service')],
    }),
    rt('', 'v1', 'endpoints', 'Endpoints', { shortNames: ['ep'], singular: 'endpoints' }),
    rt('', 'v1', 'configmaps', 'ConfigMap', { shortNames: ['cm'] }),
    rt('', 'v1', 'secrets', 'Secret'),
    rt('', 'v1', 'serviceaccounts', 'ServiceAccount', {
      shortNames: ['sa'],
      subresources: [
        { name: 'token', kind: 'TokenRequest', verbs: ['create'], group: 'authentication.k8s.io', version: 'v1' },
      ],
    }),
    rt('', 'v1', 'events', 'Event', { shortNames: ['ev'] }),
    rt('', 'v1', 'nodes', 'Node', { namespaced: false, shortNames: ['no'], subresources: [status('Node')] }),
    rt('apps', 'v1', 'deployments', 'Deployment', {
      shortNames: ['deploy'],
      categories: ['all'],
      generation: true,
      subresources: [status('Deployment'), scale],
    }),
    rt('apps', 'v1', 'replicasets', 'ReplicaSet', {
      shortNames: ['rs'],
      categories: ['all'],
      generation: true,
      subresources: [status('ReplicaSet'), scale],
    }),
    rt('batch', 'v1', 'jobs', 'Job', { categories: ['all'], generation: true, subresources: [status('Job')] }),
    // Stored only (no autoscaler runs): devop reads them to refuse --replace on a workload an HPA scales.
    rt('autoscaling', 'v2', 'horizontalpodautoscalers', 'HorizontalPodAutoscaler', {
      shortNames: ['hpa'],
      categories: ['all'],
      subresources: [status('HorizontalPodAutoscaler')],
    }),
    rt('coordination.k8s.io', 'v1', 'leases', 'Lease'),
    rt('policy', 'v1', 'poddisruptionbudgets', 'PodDisruptionBudget', {
      shortNames: ['pdb'],
      generation: true,
      subresources: [status('PodDisruptionBudget')],
    }),
    rt('events.k8s.io', 'v1', 'events', 'Event', { shortNames: ['ev'] }),
    rt('apiextensions.k8s.io', 'v1', 'customresourcedefinitions', 'CustomResourceDefinition', {
      namespaced: false,
      shortNames: ['crd', 'crds'],
      categories: ['api-extensions'],
      generation: true,
      subresources: [status('CustomResourceDefinition')],
    }),
    rt('apiregistration.k8s.io', 'v1', 'apiservices', 'APIService', {
      namespaced: false,
      categories: ['api-extensions'],
      subresources: [status('APIService')],
    }),
    rt('admissionregistration.k8s.io', 'v1', 'validatingwebhookconfigurations', 'ValidatingWebhookConfiguration', {
      namespaced: false,
      categories: ['api-extensions'],
    }),
    rt('admissionregistration.k8s.io', 'v1', 'mutatingwebhookconfigurations', 'MutatingWebhookConfiguration', {
      namespaced: false,
      categories: ['api-extensions'],
    }),
    rt('authorization.k8s.io', 'v1', 'selfsubjectaccessreviews', 'SelfSubjectAccessReview', {
      namespaced: false,
      verbs: ['create'],
    }),
    rt('authorization.k8s.io', 'v1', 'selfsubjectrulesreviews', 'SelfSubjectRulesReview', {
      namespaced: false,
      verbs: ['create'],
    }),
    rt('authentication.k8s.io', 'v1', 'selfsubjectreviews', 'SelfSubjectReview', {
      namespaced: false,
      verbs: ['create'],
    }),
    rt('rbac.authorization.k8s.io', 'v1', 'clusterrolebindings', 'ClusterRoleBinding', { namespaced: false }),
    rt('rbac.authorization.k8s.io', 'v1', 'clusterroles', 'ClusterRole', { namespaced: false }),
    rt('rbac.authorization.k8s.io', 'v1', 'rolebindings', 'RoleBinding'),
    rt('rbac.authorization.k8s.io', 'v1', 'roles', 'Role'),
  ];
}

/** Kinds that are only ever created and answered, never stored (reviews). */
export const VIRTUAL_RESOURCES = new Set(['selfsubjectaccessreviews', 'selfsubjectrulesreviews', 'selfsubjectreviews']);

export function storeKey(t: { group: string; resource: string }): string {
  return `${t.group}/${t.resource}`;
}

export function apiVersionOf(t: { group: string; version: string }): string {
  return t.group ? `${t.group}/${t.version}` : t.version;
}

/** The custom resource types that an established CRD serves (one per served version). */
export function resourcesFromCrd(crd: K8sObject): ResourceType[] {
  const spec = crd.spec ?? {};
  const names = spec.names ?? {};
  const out: ResourceType[] = [];
  for (const v of spec.versions ?? []) {
    if (v.served === false) continue;
    const hasStatus = Boolean(v.subresources?.status);
    const subresources: Subresource[] = [];
    if (hasStatus) subresources.push(status(names.kind));
    if (v.subresources?.scale) subresources.push({ ...scale });
    out.push(
      rt(spec.group, v.name, names.plural, names.kind, {
        namespaced: spec.scope !== 'Cluster',
        singular: names.singular ?? String(names.kind).toLowerCase(),
        shortNames: names.shortNames ?? [],
        categories: names.categories ?? [],
        subresources,
        hasStatus,
        generation: true,
        printerColumns: v.additionalPrinterColumns,
        custom: true,
        schema: v.schema?.openAPIV3Schema,
      }),
    );
    out[out.length - 1].listKind = names.listKind ?? `${names.kind}List`;
  }
  return out;
}
