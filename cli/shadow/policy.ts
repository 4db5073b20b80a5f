// What the shadow API proxy does with each request: pass a read, answer a Lease from memory, send a write as a dry run,
// or refuse a class it cannot make safe — decided on the path as kube-apiserver will parse it (k8s.io/apiserver
// pkg/endpoints/request/requestinfo.go) — and the DeleteOptions body with dryRun All that a DELETE carries upstream.

/** A parsed Kubernetes resource path: /api/v1/… or /apis/GROUP/VERSION/… */
export interface ApiPath {
  group: string;
  version: string;
  namespace?: string;
  resource: string;
  name?: string;
  subresource?: string;
  /** Segments after the subresource (a proxy's path): no write has them. */
  extra?: string[];
  /** The verb named in the path (/api/v1/watch/…, the old /api/v1/proxy/…). */
  pathVerb?: 'watch' | 'proxy';
}

export type ShadowRoute =
  | { kind: 'read' }
  | { kind: 'review' }
  | { kind: 'lease'; path: ApiPath }
  | { kind: 'write'; verb: string; path: ApiPath }
  | { kind: 'refuse'; code: number; reason: string; message: string };

export const WRITE_VERBS: Record<string, string> = { POST: 'create', PUT: 'update', PATCH: 'patch', DELETE: 'delete' };
const READ_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);
/** The groups of the kinds whose create only answers (access and token reviews): they store nothing. */
const REVIEW_GROUPS = new Set(['authorization.k8s.io', 'authentication.k8s.io']);
/**
 * Connect subresources (k8s.io/apiserver handlers/rest.go ConnectResource): no dry run exists for them. exec and attach
 * run a command in a container; portforward and proxy (pods, services, nodes — the kubelet's API) reach a server whose
 * own writes no API server can dry-run.
 */
const CONNECT_SUBRESOURCES: Record<string, string> = {
  exec: 'it would run a command in a container',
  attach: 'it would write to a running container',
  portforward: "it would reach the pod's ports, whose writes devop cannot dry-run",
  proxy: 'it would reach an application or the kubelet, whose writes devop cannot dry-run',
};

/** The path's segments, decoded, or why they cannot be trusted to parse the same upstream. */
export function pathSegments(rawPath: string): string[] | string {
  if (!rawPath.startsWith('/')) return 'the request path does not start with /';
  if (rawPath.includes('#')) return 'the request path holds a #';
  const raw = rawPath.slice(1).split('/');
  if (raw.length > 1 && raw[raw.length - 1] === '') raw.pop(); // one trailing slash, trimmed as requestinfo.go does
  const segments: string[] = [];
  for (const segment of raw) {
    let decoded: string;
    try {
      decoded = decodeURIComponent(segment);
    } catch {
      return `the path segment "${segment}" is not valid percent-encoding`;
    }
    // kube-apiserver splits the decoded path: pods/x%2Fexec is pods/x/exec there. An empty, . or .. segment is
    // cleaned or routed differently by servers and proxies on the way.
    if (decoded.includes('/')) return `the path segment "${segment}" decodes to one holding /`;
    if (decoded === '.' || decoded === '..') return `the path holds a "${segment}" segment`;
    if (decoded === '' && raw.length > 1) return 'the path holds an empty segment (//)';
    segments.push(decoded);
  }
  return segments;
}

/** Parses decoded segments as requestinfo.go does; undefined for a non-resource path (/version, /api, /apis/g/v). */
export function parseSegments(parts: string[]): ApiPath | undefined {
  let group: string;
  let rest: string[];
  if (parts[0] === 'api' && parts.length >= 3) [group, rest] = ['', parts.slice(1)];
  else if (parts[0] === 'apis' && parts.length >= 4) [group, rest] = [parts[1], parts.slice(2)];
  else return undefined;
  const version = rest[0];
  rest = rest.slice(1);
  let pathVerb: ApiPath['pathVerb'];
  if (rest[0] === 'watch' || rest[0] === 'proxy') [pathVerb, rest] = [rest[0], rest.slice(1)];
  let namespace: string | undefined;
  // namespaces/NS/RESOURCE/…, except a namespace's own subresources (namespaces/NS/status, …/finalize).
  if (rest[0] === 'namespaces' && rest.length > 1) {
    namespace = rest[1];
    if (rest.length > 2 && !['status', 'finalize'].includes(rest[2])) rest = rest.slice(2);
  }
  const [resource, name, subresource, ...extra] = rest;
  return {
    group,
    version,
    ...(namespace !== undefined ? { namespace } : {}),
    resource: resource ?? '',
    ...(name !== undefined ? { name } : {}),
    ...(subresource !== undefined ? { subresource } : {}),
    ...(extra.length > 0 ? { extra } : {}),
    ...(pathVerb ? { pathVerb } : {}),
  };
}

export function parseApiPath(rawPath: string): ApiPath | undefined {
  const segments = pathSegments(rawPath);
  return typeof segments === 'string' ? undefined : parseSegments(segments);
}

/**
 * An access or token review: passes as it is (it stores nothing). Only a create in the built-in groups: a custom
 * resource whose name ends in "reviews" is stored like any other, so it is a dry run.
 */
export function isReview(path: ApiPath | undefined, method = 'POST'): boolean {
  return Boolean(
    method === 'POST' && path && REVIEW_GROUPS.has(path.group) && path.resource.endsWith('reviews') && !path.name,
  );
}

/** Where a request goes. `rawPath` is the request target's path as the client sent it (still percent-encoded). */
export function routeRequest(method: string, rawPath: string, headers: Record<string, unknown>): ShadowRoute {
  const impersonation = Object.keys(headers).find((h) => h.toLowerCase().startsWith('impersonate-'));
  if (impersonation)
    return forbidden(
      `devop --shadow does not forward ${impersonation} headers: the API server would act as someone else; ` +
        'drop the header (kubectl --as) or run the command without --shadow',
    );
  const segments = pathSegments(rawPath);
  if (typeof segments === 'string')
    return forbidden(
      `devop --shadow does not forward ${rawPath}: ${segments}, which the API server may parse otherwise; ` +
        'send the path without encoded slashes or dot segments',
    );
  const path = parseSegments(segments);
  const connect =
    path?.pathVerb === 'proxy'
      ? 'proxy'
      : path?.subresource !== undefined && Object.hasOwn(CONNECT_SUBRESOURCES, path.subresource);
  if (path && connect) {
    const sub = path.pathVerb === 'proxy' ? 'proxy' : (path.subresource as string);
    return forbidden(
      `devop --shadow does not forward ${path.resource}/${sub}: ${CONNECT_SUBRESOURCES[sub]}; ` +
        'run the command without --shadow to reach it',
    );
  }
  if (path?.resource === 'serviceaccounts' && path.subresource === 'token')
    return forbidden(
      'devop --shadow does not forward serviceaccounts/token: the API server mints a real token even in a dry run ' +
        '(pkg/registry/core/serviceaccount/storage/token.go); run the command without --shadow to get one',
    );
  // A Lease by name, or a new one: leader election, answered from memory (leases.ts).
  const lease = path?.group === 'coordination.k8s.io' && path.resource === 'leases' && path.namespace;
  const leaseRequest = path?.name ? method === 'GET' || Object.hasOwn(WRITE_VERBS, method) : method === 'POST';
  if (path && lease && leaseRequest && !path.subresource && !path.pathVerb) return { kind: 'lease', path };
  if (READ_METHODS.has(method)) return { kind: 'read' };
  const verb = Object.hasOwn(WRITE_VERBS, method) ? WRITE_VERBS[method] : undefined;
  if (!verb)
    return forbidden(`devop --shadow forwards reads and create/update/patch/delete only, not ${method}: use those`);
  if (!path)
    return forbidden(
      `devop --shadow does not forward ${method} ${rawPath}: it is not a resource path, so no dry run applies; ` +
        'run the command without --shadow to change the server',
    );
  if (path.pathVerb || !path.resource || path.extra)
    return forbidden(
      `devop --shadow does not forward ${method} ${rawPath}: it cannot tell which object the write would change; ` +
        'write through /api/v1/… or /apis/GROUP/VERSION/… resource paths',
    );
  if (isReview(path, method)) return { kind: 'review' };
  return { kind: 'write', verb: verb === 'delete' && !path.name ? 'deletecollection' : verb, path };
}

/** The DeleteOptions fields that kube-apiserver reads from the query of a DELETE without a body. */
const DELETE_QUERY_OPTIONS = [
  'gracePeriodSeconds',
  'orphanDependents',
  'propagationPolicy',
  'ignoreStoreReadErrorWithClusterBreakingPotential',
];

/**
 * The body a DELETE carries upstream: the client's JSON DeleteOptions (or, without a body, its query options) with
 * dryRun ["All"]. kube-apiserver reads DeleteOptions from the body when there is one and ignores the query then
 * (handlers/delete.go), so the dry run must be in the body; with a body always sent no server reads it elsewhere.
 */
export function dryRunDeleteBody(
  contentType: string | undefined,
  body: Buffer,
  query: URLSearchParams,
): { body: Buffer } | { code: number; reason: string; message: string } {
  let options: Record<string, unknown> = {};
  if (body.length > 0) {
    const mediaType = (contentType ?? '').split(';')[0].trim().toLowerCase();
    // No Content-Type is JSON upstream too (negotiation.NegotiateInputSerializerForMediaType takes the first, JSON).
    if (mediaType !== '' && mediaType !== 'application/json')
      return {
        code: 415,
        reason: 'UnsupportedMediaType',
        message:
          `devop --shadow adds dryRun to JSON DeleteOptions only, not ${mediaType}: ` +
          'send the delete as application/json (client-go: ContentType "application/json")',
      };
    let parsed: unknown;
    try {
      parsed = JSON.parse(body.toString('utf8'));
    } catch (err) {
      parsed = err;
    }
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed) || parsed instanceof Error)
      return {
        code: 400,
        reason: 'BadRequest',
        message: 'devop --shadow could not read the DELETE body as a JSON DeleteOptions object: send one',
      };
    options = parsed as Record<string, unknown>;
  } else {
    for (const key of DELETE_QUERY_OPTIONS) {
      const value = query.get(key);
      if (value !== null) options[key] = queryValue(value);
    }
  }
  // Any spelling of dryRun goes (a decoder that matched keys without case would read it), then the one that counts.
  const rest = Object.fromEntries(Object.entries(options).filter(([key]) => key.toLowerCase() !== 'dryrun'));
  return { body: Buffer.from(JSON.stringify({ ...rest, dryRun: ['All'] })) };
}

function queryValue(value: string): unknown {
  if (/^-?\d+$/.test(value)) return Number(value);
  if (value === 'true' || value === 'false') return value === 'true';
  return value;
}

function forbidden(message: string): ShadowRoute {
  return { kind: 'refuse', code: 403, reason: 'Forbidden', message };
}
