// Server-side apply's field ownership: which manager owns which fields (metadata.managedFields), the 409 when an apply
// changes a field another manager owns, force=true taking it over, and pruning what an applier stopped applying.
// Read from sigs.k8s.io/structured-merge-diff merge/update.go (Apply, update, prune) and k8s.io/apiserver
// pkg/endpoints/handlers/fieldmanager (stripmeta.go, conflict.go). Lists are owned whole (atomic), not per key.
import { ApiError, type K8sObject } from './errors.js';

type Json = unknown;
type Path = string[];

interface Owner {
  manager: string;
  operation: 'Apply' | 'Update';
  apiVersion?: string;
  time?: string;
  paths: Map<string, Path>;
}

const isMap = (v: Json): v is Record<string, Json> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The fields an object sets, leaf by leaf, without what the server owns (stripmeta.go). */
function leaves(o: Json, at: Path = [], out = new Map<string, Path>()): Map<string, Path> {
  if (!isMap(o)) {
    out.set(JSON.stringify(at), at);
    return out;
  }
  for (const [k, v] of Object.entries(o)) {
    if (v === undefined) continue;
    if (at.length === 0 && (k === 'apiVersion' || k === 'kind' || k === 'status')) continue;
    if (at.length === 1 && at[0] === 'metadata' && SERVER_META.has(k)) continue;
    leaves(v, [...at, k], out);
  }
  return out;
}

const SERVER_META = new Set([
  'name',
  'namespace',
  'uid',
  'resourceVersion',
  'generation',
  'creationTimestamp',
  'deletionTimestamp',
  'deletionGracePeriodSeconds',
  'managedFields',
  'selfLink',
]);

function valueAt(o: Json, p: Path): Json {
  let v = o;
  for (const k of p) v = isMap(v) ? v[k] : undefined;
  return v;
}

function removeAt(o: Json, p: Path): void {
  let v = o;
  for (const k of p.slice(0, -1)) v = isMap(v) ? v[k] : undefined;
  if (isMap(v)) delete v[p[p.length - 1]];
}

function toFieldsV1(paths: Iterable<Path>): Record<string, Json> {
  const root: Record<string, Json> = {};
  for (const p of paths) {
    let node = root;
    for (const k of p) {
      node[`f:${k}`] ??= {};
      node = node[`f:${k}`] as Record<string, Json>;
    }
  }
  return root;
}

function fromFieldsV1(f: Json, at: Path = [], out = new Map<string, Path>()): Map<string, Path> {
  const children = isMap(f) ? Object.keys(f).filter((k) => k.startsWith('f:')) : [];
  if (children.length === 0 && at.length > 0) out.set(JSON.stringify(at), at);
  for (const k of children) fromFieldsV1((f as Record<string, Json>)[k], [...at, k.slice(2)], out);
  return out;
}

function ownersOf(o: K8sObject | undefined): Owner[] {
  const entries: Record<string, Json>[] = Array.isArray(o?.metadata?.managedFields) ? o.metadata.managedFields : [];
  return entries.map((e) => ({
    manager: String(e.manager ?? ''),
    operation: e.operation === 'Apply' ? 'Apply' : 'Update',
    apiVersion: e.apiVersion as string | undefined,
    time: e.time as string | undefined,
    paths: fromFieldsV1(e.fieldsV1),
  }));
}

const printPath = (p: Path) => p.map((k) => `.${k}`).join('');
const printManager = (o: Owner) =>
  o.operation === 'Apply' ? `"${o.manager}"` : `"${o.manager}" using ${o.apiVersion ?? 'v1'}`;

/** The 409 of an apply that would change fields other managers own, worded as conflict.go words it. */
function conflictError(conflicts: { owner: Owner; path: Path }[]): ApiError {
  const causes = conflicts.map((c) => ({
    reason: 'FieldManagerConflict',
    message: `conflict with ${printManager(c.owner)}`,
    field: printPath(c.path),
  }));
  let message: string;
  if (conflicts.length === 1) {
    const [only] = conflicts;
    message = `Apply failed with 1 conflict: conflict with ${printManager(only.owner)}: ${printPath(only.path)}`;
  } else {
    const byOwner = new Map<string, string[]>();
    for (const c of conflicts)
      byOwner.set(printManager(c.owner), [...(byOwner.get(printManager(c.owner)) ?? []), printPath(c.path)]);
    message = `Apply failed with ${conflicts.length} conflicts: ${[...byOwner]
      .map(([m, ps]) => `conflicts with ${m}:\n${ps.map((p) => `- ${p}`).join('\n')}`)
      .join('\n')}`;
  }
  return new ApiError(409, 'Conflict', message, { causes });
}

/**
 * Records an apply by `manager` of `config` that turned `live` (undefined on create) into `merged`: prunes what the
 * manager applied last time and no longer applies (unless another applier owns it), refuses with 409 a change to a
 * field another manager owns unless `force`, then hands such fields over. Returns `merged` with its managedFields.
 */
export function recordApply(
  live: K8sObject | undefined,
  merged: K8sObject,
  config: K8sObject,
  manager: string,
  force: boolean,
): K8sObject {
  const owners = ownersOf(live);
  const applied = leaves(config);
  const self = owners.find((o) => o.manager === manager && o.operation === 'Apply');
  const others = owners.filter((o) => o !== self);
  if (self) {
    for (const [key, p] of self.paths) {
      if (applied.has(key) || others.some((o) => o.operation === 'Apply' && o.paths.has(key))) continue;
      removeAt(merged, p);
    }
  }
  const before = live ? leaves(live) : new Map<string, Path>();
  const after = leaves(merged);
  const changed = [...after].filter(([k, p]) => !before.has(k) || !same(valueAt(live, p), valueAt(merged, p)));
  const removed = [...before.keys()].filter((k) => !after.has(k));
  const conflicts = others.flatMap((owner) =>
    changed.filter(([k]) => owner.paths.has(k)).map(([k, path]) => ({ owner, key: k, path })),
  );
  if (conflicts.length > 0 && !force) throw conflictError(conflicts);
  for (const c of conflicts) c.owner.paths.delete(c.key);
  for (const o of others) for (const k of removed) o.paths.delete(k);
  const next: Owner[] = [
    ...others.filter((o) => o.paths.size > 0),
    {
      manager,
      operation: 'Apply',
      apiVersion: config.apiVersion,
      time: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
      paths: applied,
    },
  ];
  merged.metadata = {
    ...merged.metadata,
    managedFields: next.map((o) => ({
      manager: o.manager,
      operation: o.operation,
      apiVersion: o.apiVersion,
      time: o.time,
      fieldsType: 'FieldsV1',
      fieldsV1: toFieldsV1(o.paths.values()),
    })),
  };
  return merged;
}

const same = (a: Json, b: Json) => JSON.stringify(a) === JSON.stringify(b);
