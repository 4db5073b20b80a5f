// The Kubernetes wire shapes this APIService speaks: discovery documents per step, Status errors, Table answers,
// OpenAPI.
export const GROUP = 'farm.example.com';
export const VERSION = 'v1alpha';
export const GROUP_VERSION = `${GROUP}/${VERSION}`;

/** The walkthrough's steps: 1 = an empty group version, 2 = + Llama, 3 = + FarmPod. */
export type Step = 1 | 2 | 3;

export interface ApiResource {
  name: string;
  singularName: string;
  namespaced: boolean;
  kind: string;
  verbs: string[];
  shortNames?: string[];
}

export const LLAMAS: ApiResource = {
  name: 'llamas',
  singularName: 'llama',
  namespaced: true,
  kind: 'Llama',
  verbs: ['get', 'list'],
};
export const FARMPODS: ApiResource = {
  name: 'farmpods',
  singularName: 'farmpod',
  namespaced: true,
  kind: 'FarmPod',
  verbs: ['list'],
};

export function resourcesOf(step: Step): ApiResource[] {
  return [...(step >= 2 ? [LLAMAS] : []), ...(step >= 3 ? [FARMPODS] : [])];
}

export function apiResourceList(step: Step): object {
  return { kind: 'APIResourceList', apiVersion: 'v1', groupVersion: GROUP_VERSION, resources: resourcesOf(step) };
}

export function apiGroup(): object {
  const version = { groupVersion: GROUP_VERSION, version: VERSION };
  return { kind: 'APIGroup', apiVersion: 'v1', name: GROUP, versions: [version], preferredVersion: version };
}

export function apiGroupList(): object {
  const { kind: _kind, apiVersion: _apiVersion, ...group } = apiGroup() as Record<string, unknown>;
  return { kind: 'APIGroupList', apiVersion: 'v1', groups: [group] };
}

export interface StatusError {
  code: number;
  reason: string;
  message: string;
  details?: { name?: string; group?: string; kind?: string };
}

export function status(err: StatusError): object {
  return { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', ...err };
}

export function notFound(resource: string, name: string): StatusError {
  return {
    code: 404,
    reason: 'NotFound',
    message: `${resource}.${GROUP} "${name}" not found`,
    details: { name, group: GROUP, kind: resource },
  };
}

export function pathNotFound(path: string): StatusError {
  return { code: 404, reason: 'NotFound', message: `the server could not find the requested resource (${path})` };
}

export function methodNotAllowed(method: string, resource: string): StatusError {
  return {
    code: 405,
    reason: 'MethodNotAllowed',
    message: `${method} is not supported on ${resource}.${GROUP} (this example serves get and list only)`,
  };
}

/**
 * Which Table version the client asked for in Accept (kubectl get: `application/json;as=Table;v=v1;g=meta.k8s.io,…`).
 */
export function tableVersionAccepted(accept: string | undefined): 'v1' | 'v1beta1' | undefined {
  for (const range of (accept ?? '').split(',')) {
    const [mediaType, ...paramList] = range.split(';').map((s) => s.trim());
    const params = new Map(paramList.map((p) => p.split('=').map((s) => s.trim()) as [string, string]));
    if (mediaType === 'application/json' && params.get('as') === 'Table' && params.get('g') === 'meta.k8s.io') {
      const v = params.get('v');
      if (v === 'v1' || v === 'v1beta1') return v;
    }
    // A plain JSON range before any Table range means the client prefers the object itself.
    if ((mediaType === 'application/json' || mediaType === '*/*') && !params.has('as')) return undefined;
  }
  return undefined;
}

export interface TableColumn<T> {
  name: string;
  type: 'string' | 'integer' | 'number' | 'date';
  description: string;
  cell: (item: T) => string | number;
}

interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: Record<string, unknown>;
}

/**
 * A meta.k8s.io Table, as kube-apiserver answers `kubectl get` (includeObject=None|Metadata|Object, default Metadata).
 */
export function table<T extends KubeObject>(
  version: 'v1' | 'v1beta1',
  columns: TableColumn<T>[],
  items: T[],
  listMeta: Record<string, unknown>,
  includeObject: string | null,
  now: Date = new Date(),
): object {
  const nameColumn: TableColumn<T> = {
    name: 'Name',
    type: 'string',
    description: 'Name of the object',
    cell: (i) => String(i.metadata.name),
  };
  const ageColumn: TableColumn<T> = {
    name: 'Age',
    type: 'date',
    description: 'Time since creation',
    // Server-side printing sends the age already written out, as kube-apiserver does: kubectl prints cells as they
    // come.
    cell: (i) =>
      i.metadata.creationTimestamp
        ? humanDuration(now.getTime() - Date.parse(String(i.metadata.creationTimestamp)))
        : '<unknown>',
  };
  const all = [nameColumn, ...columns, ageColumn];
  const rowObject = (item: T): object | undefined => {
    if (includeObject === 'None') return undefined;
    if (includeObject === 'Object') return item;
    return { kind: 'PartialObjectMetadata', apiVersion: `meta.k8s.io/${version}`, metadata: item.metadata };
  };
  return {
    kind: 'Table',
    apiVersion: `meta.k8s.io/${version}`,
    metadata: listMeta,
    columnDefinitions: all.map((c) => ({
      name: c.name,
      type: c.type === 'date' ? 'string' : c.type,
      format: c.type === 'date' ? 'date' : c.name === 'Name' ? 'name' : '',
      description: c.description,
      priority: 0,
    })),
    rows: items.map((item) => ({ cells: all.map((c) => c.cell(item)), object: rowObject(item) })),
  };
}

/**
 * An age as kubectl shows it (k8s.io/apimachinery duration.HumanDuration): 45s, 3m20s, 15m, 2h5m, 10h, 3d4h, 20d, 2y3d.
 */
export function humanDuration(ms: number): string {
  const seconds = Math.floor(ms / 1000);
  if (seconds < -1) return '<invalid>';
  if (seconds < 0) return '0s';
  if (seconds < 120) return `${seconds}s`;
  const minutes = Math.floor(seconds / 60);
  const withUnit = (big: number, bigUnit: string, small: number, smallUnit: string): string =>
    small === 0 ? `${big}${bigUnit}` : `${big}${bigUnit}${small}${smallUnit}`;
  if (minutes < 10) return withUnit(minutes, 'm', seconds % 60, 's');
  if (minutes < 180) return `${minutes}m`;
  const hours = Math.floor(minutes / 60);
  if (hours < 8) return withUnit(hours, 'h', minutes % 60, 'm');
  if (hours < 48) return `${hours}h`;
  if (hours < 24 * 8) return withUnit(Math.floor(hours / 24), 'd', hours % 24, 'h');
  if (hours < 24 * 365 * 2) return `${Math.floor(hours / 24)}d`;
  if (hours < 24 * 365 * 8) return withUnit(Math.floor(hours / 24 / 365), 'y', Math.floor(hours / 24) % 365, 'd');
  return `${Math.floor(hours / 24 / 365)}y`;
}

const objectMetaRef = { type: 'object', description: 'Standard object metadata.' };

function definitions(step: Step): Record<string, object> {
  const gvk = (kind: string) => [{ group: GROUP, version: VERSION, kind }];
  const defs: Record<string, object> = {};
  if (step >= 2) {
    defs[`com.example.farm.${VERSION}.Llama`] = {
      type: 'object',
      description: 'A llama on the farm.',
      properties: {
        apiVersion: { type: 'string' },
        kind: { type: 'string' },
        metadata: objectMetaRef,
        spec: {
          type: 'object',
          properties: {
            weight: { type: 'integer', description: 'kg' },
            height: { type: 'integer', description: 'cm' },
          },
        },
      },
      'x-kubernetes-group-version-kind': gvk('Llama'),
    };
  }
  if (step >= 3) {
    defs[`com.example.farm.${VERSION}.FarmPod`] = {
      type: 'object',
      description: 'A pod of the namespace, seen from the farm.',
      properties: {
        apiVersion: { type: 'string' },
        kind: { type: 'string' },
        metadata: objectMetaRef,
        spec: { type: 'object', properties: { containers: { type: 'integer', description: 'number of containers' } } },
      },
      'x-kubernetes-group-version-kind': gvk('FarmPod'),
    };
  }
  return defs;
}

/** A minimal swagger 2.0 document: the aggregator merges it into the cluster's /openapi/v2. */
export function openApiV2(step: Step): object {
  return {
    swagger: '2.0',
    info: { title: 'farm-operator', version: VERSION },
    paths: {},
    definitions: definitions(step),
  };
}

export const OPENAPI_V3_PATH = `/openapi/v3/apis/${GROUP}/${VERSION}`;

/** The /openapi/v3 index: one entry per group version, pointing at its document. */
export function openApiV3Index(step: Step): object {
  return { paths: { [`apis/${GROUP}/${VERSION}`]: { serverRelativeURL: `${OPENAPI_V3_PATH}?hash=step${step}` } } };
}

export function openApiV3(step: Step): object {
  return {
    openapi: '3.0.0',
    info: { title: 'farm-operator', version: VERSION },
    paths: {},
    components: { schemas: definitions(step) },
  };
}
