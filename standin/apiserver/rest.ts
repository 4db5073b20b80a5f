// REST verbs on resources and their plain subresources (status, scale, ephemeralcontainers, binding, eviction, token,
// finalize) plus the review kinds (SelfSubjectAccessReview, SelfSubjectRulesReview, SelfSubjectReview).
import type { IncomingMessage, ServerResponse } from 'node:http';
import { parse as parseYaml } from 'yaml';
import { ApiError, badRequest, invalid, methodNotAllowed, statusSuccess, type K8sObject } from './errors.js';
import type { Admission, Operation } from './admission.js';
import type { Authenticator, Identity } from './auth.js';
import type { Objects } from './objects.js';
import { checkEviction } from './controllers/disruption.js';
import { checkFields } from './field-validation.js';
import type { OpenApiSchemas } from './openapi.js';
import { applyPatch, patchKindOf } from './patch.js';
import { decodeProtobuf, PROTOBUF_CONTENT_TYPE } from './protobuf.js';
import { listVersion, validateListOptions } from './list-options.js';
import { apiVersionOf, storeKey, type ResourceType } from './resources.js';
import { parseFieldSelector, parseLabelSelector, queryFlag } from './selectors.js';
import { toTable, wantsTable } from './table.js';
import { tokenRequest } from './token-request.js';
import { serveWatch } from './watch.js';
import {
  deleteOptions,
  deleteOptionsFromBody,
  isDryRun,
  readDeleteBody,
  readRawBody,
  WRITE_OPTIONS,
} from './write-options.js';

export interface ResourceRequest {
  method: string;
  t: ResourceType;
  ns: string;
  name?: string;
  sub?: string;
  query: URLSearchParams;
  identity: Identity;
  /** Adds a `Warning: 299 - "…"` header to the answer (k8s.io/apiserver pkg/warning). */
  warn?: (text: string) => void;
}

export interface RestContext {
  objects: Objects;
  auth: Authenticator;
  /** Registers a stop function for a long-running response (watch), so that the server can end it on stop. */
  track(stop: () => void): () => void;
  admission: Admission;
  schemas: OpenApiSchemas;
}

export async function readBody(req: IncomingMessage): Promise<K8sObject | undefined> {
  const raw = await readRawBody(req);
  const ct = req.headers['content-type'] ?? '';
  if (ct.startsWith(PROTOBUF_CONTENT_TYPE)) return raw.length ? decodeProtobuf(raw) : undefined;
  const text = raw.toString('utf8');
  if (text.trim() === '') return undefined;
  try {
    return ct.includes('yaml') ? parseYaml(text) : JSON.parse(text);
  } catch (e) {
    throw badRequest(`the body of the request could not be decoded: ${(e as Error).message}`);
  }
}

export function sendJson(res: ServerResponse, code: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(code, {
    'Content-Type': 'application/json',
    'Cache-Control': 'no-cache, private',
    'Content-Length': Buffer.byteLength(text),
  });
  res.end(text);
}

function stripForList(t: ResourceType, o: K8sObject): K8sObject {
  if (t.custom) return o;
  const { kind: _k, apiVersion: _a, ...rest } = o;
  return rest;
}

function scaleOf(o: K8sObject): K8sObject {
  const sel = o.spec?.selector?.matchLabels ?? {};
  return {
    kind: 'Scale',
    apiVersion: 'autoscaling/v1',
    metadata: {
      name: o.metadata.name,
      namespace: o.metadata.namespace,
      uid: o.metadata.uid,
      resourceVersion: o.metadata.resourceVersion,
      creationTimestamp: o.metadata.creationTimestamp,
    },
    spec: { replicas: o.spec?.replicas ?? 0 },
    status: {
      replicas: o.status?.replicas ?? 0,
      selector: Object.entries(sel)
        .map(([k, v]) => `${k}=${v}`)
        .join(','),
    },
  };
}

export async function handleReview(
  ctx: RestContext,
  req: IncomingMessage,
  res: ServerResponse,
  r: ResourceRequest,
): Promise<void> {
  if (r.method !== 'POST') throw methodNotAllowed();
  const body = (await readBody(req)) ?? {};
  const out: K8sObject = {
    ...body,
    apiVersion: apiVersionOf(r.t),
    kind: r.t.kind,
    metadata: { ...(body.metadata ?? {}), creationTimestamp: null },
  };
  if (r.t.resource === 'selfsubjectaccessreviews') {
    const ra = body.spec?.resourceAttributes;
    let allowed: boolean;
    if (ra) {
      allowed = ctx.auth.allowed(r.identity, {
        verb: ra.verb ?? '',
        apiGroup: ra.group ?? '',
        resource: ra.resource ?? '',
        subresource: ra.subresource || undefined,
        namespace: ra.namespace || undefined,
        name: ra.name || undefined,
      });
    } else {
      const nra = body.spec?.nonResourceAttributes ?? {};
      allowed = ctx.auth.allowedNonResource(r.identity, nra.verb ?? '', nra.path ?? '');
    }
    out.status = allowed ? { allowed: true, reason: 'allowed by the stand-in policy' } : { allowed: false };
  } else if (r.t.resource === 'selfsubjectrulesreviews') {
    out.status = ctx.auth.rulesFor(r.identity, body.spec?.namespace ?? '');
  } else {
    out.status = { userInfo: { username: r.identity.name, uid: r.identity.uid, groups: r.identity.groups } };
  }
  sendJson(res, 201, out);
}

export async function handleResource(
  ctx: RestContext,
  req: IncomingMessage,
  res: ServerResponse,
  r: ResourceRequest,
): Promise<void> {
  const { objects } = ctx;
  const { t, ns, name, sub, query: q } = r;
  const accept = req.headers.accept;
  // A DELETE's dryRun is read with its other options (deleteOptions: the body, else the query).
  const dryRun = WRITE_OPTIONS[r.method] ? isDryRun(q, WRITE_OPTIONS[r.method]) : false;
  if (sub === 'scale') {
    if (!name) throw methodNotAllowed();
    if (r.method === 'GET') return sendJson(res, 200, scaleOf(objects.get(t, ns, name)));
    if (r.method !== 'PUT' && r.method !== 'PATCH') throw methodNotAllowed();
    const cur = objects.get(t, ns, name);
    const body = (await readBody(req)) ?? {};
    let scale = scaleOf(cur);
    if (r.method === 'PUT') scale = body;
    else {
      const kind = patchKindOf(req.headers['content-type']);
      if (!kind) throw new ApiError(415, 'UnsupportedMediaType', `the body of the request was in an unknown format`);
      scale = applyPatch(kind, scale, body);
    }
    if (scale.metadata?.resourceVersion && scale.metadata.resourceVersion !== cur.metadata.resourceVersion) {
      cur.metadata.resourceVersion = scale.metadata.resourceVersion;
    }
    const updated = objects.update(
      t,
      ns,
      name,
      { ...cur, spec: { ...cur.spec, replicas: Number(scale.spec?.replicas ?? 0) } },
      { dryRun },
    );
    return sendJson(res, 200, scaleOf(updated));
  }
  if (sub === 'binding' || sub === 'eviction') {
    if (r.method !== 'POST' || !name) throw methodNotAllowed();
    const body = (await readBody(req)) ?? {};
    if (sub === 'binding') {
      const pod = objects.get(t, ns, name);
      if (pod.spec.nodeName)
        throw new ApiError(
          409,
          'Conflict',
          `Operation cannot be fulfilled on pods/binding "${name}": pod ${name} is already assigned to node ` +
            `"${pod.spec.nodeName}"`,
        );
      objects.update(t, ns, name, { ...pod, spec: { ...pod.spec, nodeName: body.target?.name } }, { dryRun });
    } else {
      // The Eviction's own DeleteOptions; the eviction is a create, so its query's dryRun makes the delete one too.
      const d = deleteOptionsFromBody(body.deleteOptions ?? {});
      checkEviction(objects, objects.get(t, ns, name), d.dryRun || dryRun);
      objects.delete(t, ns, name, { ...d, dryRun: d.dryRun || dryRun });
    }
    return sendJson(res, 201, statusSuccess());
  }
  if (sub === 'token') {
    if (r.method !== 'POST' || !name) throw methodNotAllowed();
    const account = objects.get(t, ns, name);
    return sendJson(res, 201, tokenRequest(ctx.auth, account, (await readBody(req)) ?? {}));
  }
  if (sub && !['status', 'ephemeralcontainers', 'finalize'].includes(sub))
    throw new ApiError(404, 'NotFound', 'the server could not find the requested resource');
  // Writes record their field manager (fieldManager, else the user-agent's first word: handlers/create.go).
  const fieldManager = q.get('fieldManager') || prefixFromUserAgent(req.headers['user-agent'] ?? '');
  const w = { subresource: sub === 'finalize' ? undefined : sub, dryRun, fieldManager, warn: r.warn };

  switch (r.method) {
    case 'GET': {
      if (name) {
        const o = objects.get(t, ns, name);
        return sendJson(
          res,
          200,
          wantsTable(accept)
            ? toTable(t, [o], { resourceVersion: o.metadata.resourceVersion }, q.get('includeObject') ?? undefined)
            : o,
        );
      }
      const watching = queryFlag(q, 'watch');
      validateListOptions(q, watching);
      const match = (() => {
        const l = parseLabelSelector(q.get('labelSelector') ?? undefined);
        const f = parseFieldSelector(q.get('fieldSelector') ?? undefined, storeKey(t));
        return (o: K8sObject) => l(o) && f(o);
      })();
      const listNs = t.namespaced && ns ? ns : undefined;
      if (watching) {
        const table = wantsTable(accept);
        serveWatch(
          objects,
          res,
          {
            t,
            ns: listNs,
            match,
            resourceVersion: q.get('resourceVersion') ?? undefined,
            timeoutSeconds: q.has('timeoutSeconds') ? Number(q.get('timeoutSeconds')) : undefined,
            bookmarks: queryFlag(q, 'allowWatchBookmarks'),
            sendInitialEvents: queryFlag(q, 'sendInitialEvents'),
            render: table
              ? (o) =>
                  toTable(t, [o], { resourceVersion: o.metadata.resourceVersion }, q.get('includeObject') ?? undefined)
              : undefined,
          },
          ctx.track,
        );
        return;
      }
      const at = await listVersion(objects.store, storeKey(t), listNs, q);
      const items = at.items.map((o) => objects.present(t, o)).filter(match);
      const meta = { resourceVersion: at.resourceVersion };
      if (wantsTable(accept)) return sendJson(res, 200, toTable(t, items, meta, q.get('includeObject') ?? undefined));
      return sendJson(res, 200, {
        kind: t.listKind,
        apiVersion: apiVersionOf(t),
        metadata: meta,
        items: items.map((o) => stripForList(t, o)),
      });
    }
    case 'POST': {
      if (name) throw methodNotAllowed();
      const body = (await readBody(req)) ?? {};
      if (!sub) checkFields(ctx.schemas, t, body, q, res);
      if (!ctx.admission.active(t)) return sendJson(res, 201, objects.create(t, ns, body, w));
      const object = objects.create(t, ns, body, { ...w, dryRun: true, warn: undefined });
      const admitted = await admit(ctx, r, 'CREATE', object, undefined);
      return sendJson(res, 201, objects.create(t, ns, admitted, w));
    }
    case 'PUT': {
      if (!name) throw methodNotAllowed();
      const body = (await readBody(req)) ?? {};
      if (!sub) checkFields(ctx.schemas, t, body, q, res);
      const old = objects.tryGet(t, ns, name);
      if (!ctx.admission.active(t)) return sendJson(res, old ? 200 : 201, objects.update(t, ns, name, body, w));
      const object = objects.update(t, ns, name, body, { ...w, dryRun: true });
      const admitted = await admit(ctx, r, old ? 'UPDATE' : 'CREATE', object, old);
      return sendJson(res, old ? 200 : 201, objects.update(t, ns, name, keepVersion(body, admitted), w));
    }
    case 'PATCH': {
      if (!name) throw methodNotAllowed();
      const kind = patchKindOf(req.headers['content-type']);
      if (!kind) {
        throw new ApiError(
          415,
          'UnsupportedMediaType',
          `the body of the request was in an unknown format - accepted media types include: ` +
            `application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml`,
        );
      }
      const body = (await readBody(req)) ?? {};
      // A merge, strategic or apply patch is shaped like the object; a JSON patch is a list of operations.
      if (!sub && kind !== 'json') checkFields(ctx.schemas, t, body, q, res, kind === 'strategic');
      const pw = { ...w, ...patchOptions(q, kind) };
      if (!ctx.admission.active(t)) return sendJson(res, 200, objects.patch(t, ns, name, kind, body, pw));
      const old = objects.tryGet(t, ns, name);
      const object = objects.patch(t, ns, name, kind, body, { ...pw, dryRun: true });
      const admitted = await admit(ctx, r, old ? 'UPDATE' : 'CREATE', object, old);
      // The admitted object of an apply already carries its Apply manager.
      const aw = kind === 'apply' ? { ...w, fieldManager: undefined } : w;
      if (!old) return sendJson(res, 201, objects.create(t, ns, admitted, aw));
      const versioned = kind === 'json' ? undefined : body;
      return sendJson(res, 200, objects.update(t, ns, name, keepVersion(versioned, admitted), aw));
    }
    case 'DELETE': {
      const body = await readDeleteBody(req);
      const d = deleteOptions(q, body);
      if (name) {
        if (ctx.admission.active(t)) await admit(ctx, r, 'DELETE', undefined, objects.get(t, ns, name), d.dryRun);
        const result = objects.delete(t, ns, name, d);
        // 202 only for a pending delete that asked orphanDependents=false; a graceful or finalized one is a 200
        // (apiserver pkg/endpoints/handlers/delete.go DeleteResource).
        const accepted = !result.deleted && d.orphanDependents === false;
        return sendJson(res, accepted ? 202 : 200, objects.deleteResponse(t, result));
      }
      const l = parseLabelSelector(q.get('labelSelector') ?? undefined);
      const f = parseFieldSelector(q.get('fieldSelector') ?? undefined, storeKey(t));
      const victims = objects.list(t, t.namespaced ? ns : undefined).filter((o) => l(o) && f(o));
      if (ctx.admission.active(t))
        for (const o of victims)
          await admit(
            ctx,
            { ...r, name: o.metadata.name, ns: o.metadata.namespace ?? '' },
            'DELETE',
            undefined,
            o,
            d.dryRun,
          );
      const out = victims.map((o) => objects.delete(t, o.metadata.namespace ?? '', o.metadata.name, d).object);
      return sendJson(res, 200, {
        kind: t.listKind,
        apiVersion: apiVersionOf(t),
        metadata: { resourceVersion: String(objects.store.currentRV()) },
        items: out,
      });
    }
    default:
      throw methodNotAllowed();
  }
}

/** Shows a write to the admission webhooks; returns the object to store (as mutated). */
async function admit(
  ctx: RestContext,
  r: ResourceRequest,
  operation: Operation,
  object: K8sObject | undefined,
  oldObject: K8sObject | undefined,
  dryRun = operation === 'DELETE' ? false : isDryRun(r.query, WRITE_OPTIONS[r.method]),
): Promise<K8sObject> {
  // Copies: the store hands out its own objects, and the webhooks' patches must not reach them before the write.
  const admitted = await ctx.admission.admit({
    t: r.t,
    sub: r.sub,
    ns: r.ns,
    name: object?.metadata?.name ?? oldObject?.metadata?.name ?? r.name ?? '',
    operation,
    identity: r.identity,
    object: object && structuredClone(object),
    oldObject: oldObject && structuredClone(oldObject),
    dryRun,
    warn: r.warn,
  });
  return admitted ?? {};
}

/**
 * The admitted object carries the resourceVersion it was computed from; a write that named none stays unconditional
 * (as without webhooks), so a concurrent write while the webhooks answered is not turned into a conflict.
 */
function keepVersion(body: K8sObject | undefined, admitted: K8sObject): K8sObject {
  if (body?.metadata?.resourceVersion) return admitted;
  return { ...admitted, metadata: { ...admitted.metadata, resourceVersion: undefined } };
}

/**
 * PATCH's fieldManager and force, checked as apimachinery pkg/apis/meta/v1/validation ValidatePatchOptions does: an
 * apply needs a fieldManager, force belongs to apply alone (both a 422).
 */
function patchOptions(q: URLSearchParams, kind: string): { fieldManager?: string; force?: boolean } {
  const fieldManager = q.get('fieldManager') ?? undefined;
  const cause = (field: string, reason: string, message: string) =>
    invalid('PatchOptions', 'meta.k8s.io', '', [{ field, reason, message }]);
  if (kind === 'apply' && !fieldManager) {
    throw cause('fieldManager', 'FieldValueRequired', 'Required value: is required for apply patch');
  }
  if (kind !== 'apply' && q.has('force')) {
    throw cause('force', 'FieldValueForbidden', 'Forbidden: may not be specified for non-apply patch');
  }
  return { ...(fieldManager ? { fieldManager } : {}), force: queryFlag(q, 'force') };
}

/** handlers/create.go prefixFromUserAgent: up to the first `/`, printable characters, at most 128 bytes. */
function prefixFromUserAgent(userAgent: string): string {
  let out = '';
  for (const ch of userAgent.split('/')[0].replace(/\p{C}/gu, '')) {
    if (Buffer.byteLength(out + ch) > 128) break;
    out += ch;
  }
  return out;
}
