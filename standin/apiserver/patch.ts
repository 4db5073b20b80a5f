// Patch types kube-apiserver accepts: JSON merge patch (RFC 7386), JSON patch (RFC 6902), and strategic merge patch
// with the merge keys and directives ($patch, $retainKeys, $setElementOrder, $deleteFromPrimitiveList) that kubectl
// emits.
import { ApiError, badRequest } from './errors.js';

type Json = any;

const isObj = (v: unknown): v is Record<string, Json> => typeof v === 'object' && v !== null && !Array.isArray(v);

export function mergePatch(target: Json, patch: Json): Json {
  if (!isObj(patch)) return structuredClone(patch);
  const out: Record<string, Json> = isObj(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

function unescapePointer(s: string): string {
  return s.replace(/~1/g, '/').replace(/~0/g, '~');
}

function pointerParts(path: string): string[] {
  if (path === '') return [];
  if (!path.startsWith('/')) throw badRequest(`invalid JSON pointer: ${path}`);
  return path.slice(1).split('/').map(unescapePointer);
}

/**
 * A JSON patch that does not apply (a missing path, an index out of range, a failed `test`). As the answer to PATCH,
 * kube-apiserver gives every one the same 422 and no detail (apiserver pkg/endpoints/handlers/patch.go applyJSPatch
 * through apimachinery pkg/api/errors NewGenericServerResponse, which keeps json-patch's own message out of the
 * Status); a mutating webhook's patch that does not apply is a 500 with that message (admission.ts). `failure`
 * is in json-patch's words (evanphx/json-patch v4, patch.go: its add, remove, replace, move, copy and test).
 */
export class JsonPatchError extends ApiError {
  constructor(readonly failure: string) {
    super(422, 'Invalid', 'the server rejected our request due to an error in our request', {});
  }
}

const invalidIndex = (op: string, path: string, index: string): JsonPatchError =>
  new JsonPatchError(
    `error in ${op} for path: '${path}': Unable to access invalid index: ${index}: invalid index referenced`,
  );

/** The container a pointer's last part is in, or undefined (json-patch's findObject). */
function containerOf(doc: Json, parts: string[]): { parent: Json; last: string } | undefined {
  let cur = doc;
  for (const p of parts.slice(0, -1)) {
    cur = Array.isArray(cur) ? cur[Number(p)] : isObj(cur) ? cur[p] : undefined;
    if (cur === undefined || (!Array.isArray(cur) && !isObj(cur))) return undefined;
  }
  return { parent: cur, last: parts[parts.length - 1] };
}

function getAt(doc: Json, path: string): Json | undefined {
  let cur = doc;
  for (const p of pointerParts(path)) {
    cur = Array.isArray(cur) ? cur[Number(p)] : isObj(cur) ? cur[p] : undefined;
    if (cur === undefined) return undefined;
  }
  return cur;
}

function removeAt(doc: Json, path: string, op = 'remove'): Json {
  const found = containerOf(doc, pointerParts(path));
  if (!found) throw new JsonPatchError(`${op} operation does not apply: doc is missing path: "${path}": missing value`);
  const { parent, last } = found;
  if (Array.isArray(parent)) {
    const i = Number(last);
    if (!(Number.isInteger(i) && i >= 0 && i < parent.length)) throw invalidIndex(op, path, last);
    return parent.splice(i, 1)[0];
  }
  if (!(last in parent))
    throw new JsonPatchError(
      `error in ${op} for path: '${path}': Unable to remove nonexistent key: ${last}: missing value`,
    );
  const v = parent[last];
  delete parent[last];
  return v;
}

function addAt(doc: Json, path: string, value: Json, op: 'add' | 'replace' | 'move' | 'copy'): Json {
  const parts = pointerParts(path);
  if (parts.length === 0) return value;
  const found = containerOf(doc, parts);
  if (!found) {
    const what = op === 'replace' ? `path: ${path}` : op === 'add' ? `path: "${path}"` : `destination path: ${path}`;
    throw new JsonPatchError(`${op} operation does not apply: doc is missing ${what}: missing value`);
  }
  const { parent, last } = found;
  if (Array.isArray(parent)) {
    const i = last === '-' && op !== 'replace' ? parent.length : Number(last);
    const end = op === 'replace' ? parent.length - 1 : parent.length;
    if (!(Number.isInteger(i) && i >= 0 && i <= end)) throw invalidIndex(op === 'replace' ? 'remove' : op, path, last);
    if (op === 'replace') parent[i] = value;
    else parent.splice(i, 0, value);
  } else {
    // A replace of a key the object lacks sets it, as json-patch v4 does (partialDoc.get never fails).
    parent[last] = value;
  }
  return doc;
}

export function jsonPatch(target: Json, ops: Json): Json {
  if (!Array.isArray(ops)) throw badRequest('json patch must be an array of operations');
  let doc = structuredClone(target);
  for (const op of ops) {
    switch (op.op) {
      case 'add':
        doc = addAt(doc, op.path, structuredClone(op.value), 'add');
        break;
      case 'replace':
        doc = addAt(doc, op.path, structuredClone(op.value), 'replace');
        break;
      case 'remove':
        removeAt(doc, op.path);
        break;
      case 'move': {
        if (getAt(doc, op.from) === undefined)
          throw new JsonPatchError(
            `move operation does not apply: doc is missing from path: ${op.from}: missing value`,
          );
        const v = removeAt(doc, op.from, 'move');
        doc = addAt(doc, op.path, v, 'move');
        break;
      }
      case 'copy': {
        const v = getAt(doc, op.from);
        if (v === undefined)
          throw new JsonPatchError(
            `copy operation does not apply: doc is missing from path: ${op.from}: missing value`,
          );
        doc = addAt(doc, op.path, structuredClone(v), 'copy');
        break;
      }
      case 'test': {
        const v = getAt(doc, op.path);
        if (v === undefined)
          throw new JsonPatchError(`test operation does not apply: is missing path: ${op.path}: missing value`);
        if (JSON.stringify(v) !== JSON.stringify(op.value))
          throw new JsonPatchError(`testing value ${op.path} failed: test failed`);
        break;
      }
      default:
        throw new JsonPatchError(`Unexpected kind: ${op.op}`);
    }
  }
  return doc;
}

/** Merge keys of the built-in types' lists whose patch strategy is "merge" (from the Go struct tags). */
const MERGE_KEYS: Record<string, string | ((items: Json[]) => string)> = {
  containers: 'name',
  initContainers: 'name',
  ephemeralContainers: 'name',
  env: 'name',
  ports: (items) => (items.some((i) => isObj(i) && 'containerPort' in i) ? 'containerPort' : 'port'),
  volumeMounts: 'mountPath',
  volumeDevices: 'devicePath',
  volumes: 'name',
  imagePullSecrets: 'name',
  hostAliases: 'ip',
  conditions: 'type',
  ownerReferences: 'uid',
  topologySpreadConstraints: 'topologyKey',
  resourceClaims: 'name',
  addresses: 'type',
};
/** Lists of scalars whose patch strategy is "merge" (union). */
const MERGE_PRIMITIVE_LISTS = new Set(['finalizers']);

function mergeKeyFor(field: string, items: Json[]): string | undefined {
  const k = MERGE_KEYS[field];
  return typeof k === 'function' ? k(items) : k;
}

function mergeList(field: string, orig: Json[], patch: Json[], order: Json[] | undefined): Json[] {
  if (patch.some((p) => isObj(p) && p.$patch === 'replace'))
    return patch.filter((p) => !(isObj(p) && p.$patch === 'replace')).map((p) => strip(p));
  if (MERGE_PRIMITIVE_LISTS.has(field) && patch.every((p) => !isObj(p))) {
    const out = [...orig];
    for (const p of patch) if (!out.includes(p)) out.push(p);
    return out;
  }
  const key = mergeKeyFor(field, [...orig, ...patch]);
  if (!key || !patch.every(isObj)) return patch.map((p) => strip(p));
  let out = orig.map((o) => structuredClone(o));
  for (const p of patch) {
    const idx = out.findIndex((o) => isObj(o) && o[key] === p[key]);
    if (p.$patch === 'delete') {
      if (idx >= 0) out.splice(idx, 1);
      continue;
    }
    if (idx >= 0) out[idx] = strategicMerge(out[idx], p);
    else out.push(strip(p));
  }
  if (order) {
    const pos = (o: Json) => order.findIndex((e) => isObj(e) && e[key] === o[key]);
    const ordered = out.filter((o) => pos(o) >= 0).sort((a, b) => pos(a) - pos(b));
    out = [...ordered, ...out.filter((o) => pos(o) < 0)];
  }
  return out;
}

/** Removes strategic-merge directives from a value that is inserted as a whole. */
function strip(v: Json): Json {
  if (Array.isArray(v)) return v.map(strip);
  if (!isObj(v)) return v;
  const out: Record<string, Json> = {};
  for (const [k, x] of Object.entries(v)) {
    if (k.startsWith('$')) continue;
    if (x === null) continue;
    out[k] = strip(x);
  }
  return out;
}

export function strategicMerge(target: Json, patch: Json): Json {
  if (!isObj(patch)) return structuredClone(patch);
  if (patch.$patch === 'replace') return strip(patch);
  if (patch.$patch === 'delete') return undefined;
  const out: Record<string, Json> = isObj(target) ? structuredClone(target) : {};
  for (const [k, v] of Object.entries(patch)) {
    if (k === '$patch' || k === '$retainKeys' || k.startsWith('$setElementOrder/')) continue;
    if (k.startsWith('$deleteFromPrimitiveList/')) {
      const field = k.slice('$deleteFromPrimitiveList/'.length);
      if (Array.isArray(out[field])) out[field] = out[field].filter((x: Json) => !(v as Json[]).includes(x));
      continue;
    }
    if (v === null) {
      delete out[k];
    } else if (Array.isArray(v)) {
      const order = patch[`$setElementOrder/${k}`];
      out[k] = Array.isArray(out[k]) ? mergeList(k, out[k], v, order) : mergeList(k, [], v, order);
    } else if (isObj(v)) {
      const merged = strategicMerge(out[k], v);
      if (merged === undefined) delete out[k];
      else out[k] = merged;
    } else {
      out[k] = v;
    }
  }
  for (const [k, order] of Object.entries(patch)) {
    if (!k.startsWith('$setElementOrder/') || !Array.isArray(order)) continue;
    const field = k.slice('$setElementOrder/'.length);
    if (field in patch || !Array.isArray(out[field])) continue;
    out[field] = mergeList(field, out[field], [], order);
  }
  if (Array.isArray(patch.$retainKeys)) {
    for (const k of Object.keys(out)) if (!patch.$retainKeys.includes(k)) delete out[k];
  }
  return out;
}

export type PatchKind = 'json' | 'merge' | 'strategic' | 'apply';

export function patchKindOf(contentType: string | undefined): PatchKind | undefined {
  const ct = (contentType ?? '').split(';')[0].trim();
  if (ct === 'application/json-patch+json') return 'json';
  if (ct === 'application/merge-patch+json') return 'merge';
  if (ct === 'application/strategic-merge-patch+json') return 'strategic';
  if (ct === 'application/apply-patch+yaml' || ct === 'application/apply-patch+cbor') return 'apply';
  return undefined;
}

export function applyPatch(kind: PatchKind, target: Json, patch: Json): Json {
  switch (kind) {
    case 'json':
      return jsonPatch(target, patch);
    case 'merge':
      return mergePatch(target, patch);
    case 'strategic':
      return strategicMerge(target, patch);
    case 'apply':
      // Only the scale subresource gets here; an apply to an object merges by its schema in field-managers.ts.
      return strategicMerge(target, patch);
  }
}
