// OpenAPI as kube-apiserver serves it: /openapi/v3 (an index, then one document per group-version: kube-openapi
// pkg/handler3/handler.go) and /openapi/v2 (kube-openapi pkg/handler/handler.go), from kube-apiserver v1.32.0's schemas
// (openapi-definitions.json, made by scripts/openapi-definitions.mjs) and each CRD's openAPIV3Schema.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Catalog } from './catalog.js';
import { ApiError, type K8sObject } from './errors.js';
import type { ResourceType } from './resources.js';
import { encodeOpenApiV2 } from './openapi-v2-protobuf.js';

type Schema = K8sObject;

const OBJECT_META = 'io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta';
/** The protobuf type /openapi/v2 answers with (kube-openapi pkg/handler/handler.go subTypeProtobuf)… */
export const OPENAPI_V2_PROTOBUF = 'application/com.github.proto-openapi.spec.v2.v1.0+protobuf';
/** …also for the older name, which kubectl asks for (client-go discovery/discovery_client.go OpenAPISchema). */
const OPENAPI_V2_PROTOBUF_DEPRECATED = 'application/com.github.proto-openapi.spec.v2@v1.0+protobuf';
const SERVER_TITLE = 'Kubernetes';

/** A document as served: its bytes and their ETag (kube-openapi computeETag: SHA-512, upper-case hex). */
interface Served {
  body: Buffer;
  etag: string;
}

export function loadDefinitions(): Record<string, Schema> {
  const file = new URL('./openapi-definitions.json', import.meta.url);
  return JSON.parse(readFileSync(file, 'utf8')).definitions;
}

function gvPath(group: string, version: string): string {
  return group ? `apis/${group}/${version}` : `api/${version}`;
}

function etagOf(body: Buffer): string {
  return createHash('sha512').update(body).digest('hex').toUpperCase();
}

/** Every `$ref` a schema names, as definition names. */
function refsOf(value: unknown, out: Set<string>): Set<string> {
  if (Array.isArray(value)) for (const v of value) refsOf(v, out);
  else if (value && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      if (k === '$ref' && typeof v === 'string') out.add(v.replace(/^#\/(definitions|components\/schemas)\//, ''));
      else refsOf(v, out);
    }
  }
  return out;
}

/**
 * A v2 schema in v3's form, as kube-apiserver's v3 documents have it: refs point into components/schemas, and a ref
 * with siblings (a description) is wrapped in allOf.
 */
function toV3(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(toV3);
  if (!node || typeof node !== 'object') return node;
  const o = node as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o)) if (k !== '$ref' || typeof v !== 'string') out[k] = toV3(v);
  if (typeof o.$ref !== 'string') return out;
  const ref = { $ref: o.$ref.replace('#/definitions/', '#/components/schemas/') };
  return Object.keys(out).length === 0 ? ref : { ...out, allOf: [ref] };
}

/** Query parameters that tell kubectl the server validates fields itself (so it sends fieldValidation=Strict). */
const WRITE_PARAMS = [
  { name: 'dryRun', in: 'query', schema: { type: 'string', uniqueItems: true } },
  { name: 'fieldManager', in: 'query', schema: { type: 'string', uniqueItems: true } },
  { name: 'fieldValidation', in: 'query', schema: { type: 'string', uniqueItems: true } },
];

/** The operations of one resource, in v3 form (paths are the same in v2, converted by pathsToV2). */
function resourcePaths(t: ResourceType, ref: K8sObject): K8sObject {
  const paths: K8sObject = {};
  const gvk = { group: t.group, version: t.version, kind: t.kind };
  const prefix = `/${gvPath(t.group, t.version)}`;
  const base = `${prefix}${t.namespaced ? '/namespaces/{namespace}' : ''}/${t.resource}`;
  const json = { 'application/json': { schema: ref } };
  const op = (action: string, extra: K8sObject = {}) => ({
    operationId: `${action}${t.kind}`,
    'x-kubernetes-action': action,
    'x-kubernetes-group-version-kind': gvk,
    responses: { '200': { description: 'OK', content: json } },
    ...extra,
  });
  const canList = t.verbs.includes('list');
  if (canList || t.verbs.includes('create')) {
    paths[base] = {
      ...(canList ? { get: op('list') } : {}),
      ...(t.verbs.includes('create')
        ? { post: op('post', { parameters: WRITE_PARAMS, requestBody: { content: json, required: true } }) }
        : {}),
    };
  }
  // The list across namespaces: where kubectl explain looks a kind up (kubectl pkg/explain/v2/templates/plaintext.tmpl)
  if (t.namespaced && canList) paths[`${prefix}/${t.resource}`] = { get: op('list') };
  if (t.verbs.includes('get')) {
    paths[`${base}/{name}`] = {
      get: op('get'),
      put: op('put', { parameters: WRITE_PARAMS, requestBody: { content: json, required: true } }),
      patch: op('patch', {
        parameters: [...WRITE_PARAMS, { name: 'force', in: 'query', schema: { type: 'boolean', uniqueItems: true } }],
        // A strategic merge patch only where the published schema carries the merge keys (built-in kinds, as
        // upstream): kubectl apply then reads them from here (kubectl pkg/cmd/apply/patcher.go).
        requestBody: {
          content: {
            'application/json-patch+json': { schema: { type: 'object' } },
            'application/merge-patch+json': { schema: { type: 'object' } },
            ...(t.custom ? {} : { 'application/strategic-merge-patch+json': { schema: { type: 'object' } } }),
            'application/apply-patch+yaml': { schema: { type: 'object' } },
          },
          required: true,
        },
      }),
      delete: op('delete'),
    };
  }
  return paths;
}

/** The schemas kube-apiserver publishes, and the name each kind has there. */
export class OpenApiSchemas {
  readonly definitions = loadDefinitions();
  private readonly byGvk = new Map<string, string>();

  constructor() {
    for (const [name, s] of Object.entries(this.definitions)) {
      if (name.startsWith('io.k8s.apimachinery')) continue;
      for (const g of s['x-kubernetes-group-version-kind'] ?? [])
        this.byGvk.set(`${g.group}/${g.version}/${g.kind}`, name);
    }
  }

  /** The schema name of a kind: the built-in definition, else the REST-friendly name CRDs get (reversed group). */
  nameOf(t: ResourceType, kind = t.kind): string {
    const builtin = this.byGvk.get(`${t.group}/${t.version}/${kind}`);
    if (builtin) return builtin;
    const g = t.group === '' ? 'io.k8s.api.core' : t.group.split('.').reverse().join('.');
    return `${g}.${t.version}.${kind}`;
  }

  /** The definition of a built-in kind, or a CRD's schema as the API server publishes it; undefined when unknown. */
  schemaOf(t: ResourceType): Schema | undefined {
    if (!t.custom) return this.definitions[this.nameOf(t)];
    return t.schema ? this.crdSchema(t) : undefined;
  }

  /**
   * A CRD version's openAPIV3Schema as apiextensions-apiserver publishes it (pkg/controller/openapi/builder/
   * builder.go):
   * apiVersion, kind and metadata described as on built-in kinds, metadata a reference to ObjectMeta, the kind's GVK.
   */
  private crdSchema(t: ResourceType): Schema {
    const pod = this.definitions['io.k8s.api.core.v1.Pod'].properties;
    const s = structuredClone(t.schema ?? {});
    return {
      ...s,
      type: 'object',
      properties: {
        ...(s.properties ?? {}),
        apiVersion: pod.apiVersion,
        kind: pod.kind,
        metadata: { ...pod.metadata },
      },
      'x-kubernetes-group-version-kind': [{ group: t.group, version: t.version, kind: t.kind }],
    };
  }

  /** v2 definitions for these kinds and everything they refer to (a kind without a schema keeps any field). */
  closure(types: ResourceType[]): Record<string, Schema> {
    const out: Record<string, Schema> = {};
    const todo: string[] = [];
    for (const t of types) {
      const name = this.nameOf(t);
      const schema = this.schemaOf(t);
      out[name] = schema ?? {
        type: 'object',
        'x-kubernetes-group-version-kind': [{ group: t.group, version: t.version, kind: t.kind }],
        'x-kubernetes-preserve-unknown-fields': true,
      };
      if (schema) todo.push(...refsOf(schema, new Set()));
      const list = this.byGvk.get(`${t.group}/${t.version}/${t.listKind}`);
      if (list && !t.custom) todo.push(list);
      if (t.custom && schema) todo.push(OBJECT_META);
    }
    while (todo.length > 0) {
      const name = todo.pop() as string;
      if (out[name] || !this.definitions[name]) continue;
      out[name] = this.definitions[name];
      todo.push(...refsOf(this.definitions[name], new Set()));
    }
    return out;
  }
}

/** Serves /openapi/v3 and /openapi/v2 from the catalog as it is now (CRDs come and go). */
export class OpenApi {
  private readonly cache = new Map<string, { key: string; served: Served }>();

  constructor(
    private readonly catalog: Catalog,
    readonly schemas: OpenApiSchemas,
  ) {}

  private byGroupVersion(): Map<string, ResourceType[]> {
    const byGv = new Map<string, ResourceType[]>();
    for (const t of this.catalog.all()) {
      const p = gvPath(t.group, t.version);
      byGv.set(p, [...(byGv.get(p) ?? []), t]);
    }
    return byGv;
  }

  /** Built again only when the kinds of the group-version (or a CRD's schema) changed. */
  private memo(id: string, types: unknown[], build: () => Buffer): Served {
    const key = JSON.stringify(types);
    const hit = this.cache.get(id);
    if (hit?.key === key) return hit.served;
    const body = build();
    const served = { body, etag: etagOf(body) };
    this.cache.set(id, { key, served });
    return served;
  }

  private groupVersionDoc(p: string, types: ResourceType[]): Served {
    return this.memo(`v3:${p}`, types, () => {
      const paths: K8sObject = {};
      for (const t of types) {
        const ref = { $ref: `#/components/schemas/${this.schemas.nameOf(t)}` };
        Object.assign(paths, resourcePaths(t, ref));
      }
      const schemas = toV3(this.schemas.closure(types));
      const doc = {
        openapi: '3.0.0',
        info: { title: SERVER_TITLE, version: 'unversioned' },
        paths,
        components: { schemas },
      };
      return Buffer.from(JSON.stringify(doc));
    });
  }

  /**
   * kube-openapi pkg/handler3 HandleDiscovery and HandleGroupVersion. `aggregated` gives the entries of aggregated
   * APIs' servers (their documents are proxied by the caller, as they are not served here).
   */
  async serveV3(
    req: IncomingMessage,
    res: ServerResponse,
    path: string,
    query: URLSearchParams,
    aggregated: () => Promise<Record<string, K8sObject>>,
  ): Promise<void> {
    const byGv = this.byGroupVersion();
    if (path === '/openapi/v3') {
      const paths: K8sObject = {};
      for (const [p, types] of byGv) {
        paths[p] = { serverRelativeURL: `/openapi/v3/${p}?hash=${this.groupVersionDoc(p, types).etag}` };
      }
      Object.assign(paths, await aggregated());
      const body = Buffer.from(JSON.stringify({ paths }));
      send(req, res, { body, etag: etagOf(body) }, 'application/json', {});
      return;
    }
    const p = path.slice('/openapi/v3/'.length);
    const types = byGv.get(p);
    if (!types) throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
    if (!accepts(req.headers.accept, 'application/json')) {
      notAcceptable(res);
      return;
    }
    const served = this.groupVersionDoc(p, types);
    const hash = query.get('hash');
    if (hash && hash !== served.etag) {
      // A stale hash: the client's index is old; send it where the current document is (301, as upstream).
      res.writeHead(301, { Location: `/openapi/v3/${p}?hash=${served.etag}`, 'Content-Length': 0 });
      return void res.end();
    }
    const cache: Record<string, string> = hash
      ? { 'Cache-Control': 'public, immutable', Expires: new Date(Date.now() + 365 * 86_400_000).toUTCString() }
      : {};
    send(req, res, served, 'application/json', { Vary: 'Accept', ...cache });
  }

  private v2(types: ResourceType[], aggregated: K8sObject[]): { json: Served; protobuf: Served } {
    const doc = () => {
      const paths: K8sObject = {};
      for (const t of types) {
        Object.assign(paths, resourcePaths(t, { $ref: `#/definitions/${this.schemas.nameOf(t)}` }));
      }
      const definitions = this.schemas.closure(types);
      // The APIServices' servers' documents, merged as kube-aggregator merges them (kube-openapi pkg/aggregator
      // MergeSpecsIgnorePathConflictRenamingDefinitionsAndParameters): a path already served stays the API server's;
      // a definition of the same name and content is shared, one that differs is left out here (not renamed).
      const v2Paths = pathsToV2(paths);
      for (const other of aggregated) {
        for (const [p, item] of Object.entries(other.paths ?? {})) v2Paths[p] ??= item;
        for (const [name, schema] of Object.entries(other.definitions ?? {})) definitions[name] ??= schema as Schema;
      }
      return { swagger: '2.0', info: { title: SERVER_TITLE, version: 'v1.32.0' }, paths: v2Paths, definitions };
    };
    const key: unknown[] = [...types, ...aggregated];
    const json = this.memo('v2:json', key, () => Buffer.from(JSON.stringify(doc())));
    const protobuf = this.memo('v2:protobuf', key, () => encodeOpenApiV2(doc()));
    return { json, protobuf };
  }

  /**
   * kube-openapi pkg/handler OpenAPIService.ServeHTTP: JSON or gnostic protobuf, as the Accept header asks; with the
   * APIServices' servers' documents (`aggregated`) merged in.
   */
  async serveV2(req: IncomingMessage, res: ServerResponse, aggregated: () => Promise<K8sObject[]>): Promise<void> {
    const { json, protobuf } = this.v2(this.catalog.all(), await aggregated());
    if (accepts(req.headers.accept, 'application/json')) send(req, res, json, 'application/json', {});
    else if ([OPENAPI_V2_PROTOBUF, OPENAPI_V2_PROTOBUF_DEPRECATED].some((t) => accepts(req.headers.accept, t))) {
      send(req, res, protobuf, OPENAPI_V2_PROTOBUF, {});
    } else notAcceptable(res);
  }
}

/** v3 operations back into v2's shape: body parameters and `produces` instead of requestBody and content. */
function pathsToV2(paths: K8sObject): K8sObject {
  const out: K8sObject = {};
  for (const [p, item] of Object.entries(paths)) {
    out[p] = {};
    for (const [method, op] of Object.entries(item as K8sObject)) {
      const { requestBody, responses, parameters = [], ...rest } = op;
      const schema = requestBody?.content?.['application/json']?.schema ?? { type: 'object' };
      out[p][method] = {
        ...rest,
        consumes: Object.keys(requestBody?.content ?? { '*/*': {} }),
        produces: ['application/json'],
        parameters: [
          ...(requestBody ? [{ name: 'body', in: 'body', required: true, schema }] : []),
          ...parameters.map(({ schema: s, ...param }: K8sObject) => ({ ...param, ...s })),
        ],
        responses: { '200': { description: 'OK', schema: responses['200'].content['application/json'].schema } },
      };
    }
  }
  return out;
}

/** Does the Accept header take this type (a missing header or a wildcard takes anything)? */
function accepts(accept: string | undefined, type: string): boolean {
  if (!accept) return true;
  const [main] = type.split('/');
  return accept.split(',').some((clause) => {
    const t = clause.split(';')[0].trim();
    return t === type || t === '*/*' || t === `${main}/*`;
  });
}

function notAcceptable(res: ServerResponse): void {
  res.writeHead(406, { 'Content-Length': 0 });
  res.end();
}

/** Sends a document with its ETag; a matching If-None-Match is 304 (Go's http.ServeContent, which upstream uses). */
function send(
  req: IncomingMessage,
  res: ServerResponse,
  served: Served,
  contentType: string,
  headers: Record<string, string>,
): void {
  const etag = `"${served.etag}"`;
  if (req.headers['if-none-match'] === etag) {
    res.writeHead(304, { Etag: etag, ...headers });
    return void res.end();
  }
  res.writeHead(200, {
    'Content-Type': contentType,
    'Content-Length': served.body.length,
    Etag: etag,
    ...headers,
  });
  res.end(req.method === 'HEAD' ? undefined : served.body);
}
