// Field ownership (metadata.managedFields): server-side apply merged by the kind's schema, with associative lists owned
// per key, the 409 when an apply changes a field another manager owns, force taking it over, pruning what an applier
// stopped applying; and the Update manager that every other write records. Read from sigs.k8s.io/structured-merge-diff
// (merge/update.go Apply, Update, prune; typed/merge.go; typed/tofieldset.go; typed/compare.go; fieldpath/element.go,
// serialize-pe.go) and k8s.io/apimachinery pkg/util/managedfields/internal (stripmeta.go, conflict.go,
// skipnonapplied.go, fieldmanager.go decodeLiveOrNew). List and map kinds come from the published schemas
// (x-kubernetes-list-type, -list-map-keys, -map-type, else patch strategy and merge key, as kube-openapi's schemaconv
// reads them) or a custom resource's openAPIV3Schema; a kind without any merges lists whole (upstream's deduced type).
import { ApiError, type K8sObject } from './errors.js';
import { loadDefinitions } from './openapi.js';

type Json = unknown;
type Schema = Record<string, Json>;
/** Path elements as FieldsV1 spells them: `f:name`, `k:{"name":"app"}`, `v:"x"`, `i:0`. */
type Path = string[];
/** A field set: each member path by its JSON; `leaf` (with its value) when compare.go would see a change there. */
type FieldSet = Map<string, { path: Path; leaf: boolean; value?: Json }>;

interface Owner {
  manager: string;
  operation: 'Apply' | 'Update';
  apiVersion?: string;
  time?: string;
  subresource?: string;
  paths: Map<string, Path>;
}

const isMap = (v: Json): v is Record<string, Json> => typeof v === 'object' && v !== null && !Array.isArray(v);
const same = (a: Json, b: Json) => JSON.stringify(a) === JSON.stringify(b);
const nowTime = () => new Date().toISOString().replace(/\.\d+Z$/, 'Z');

let definitions: Record<string, Schema> | undefined;
let byGvk: Map<string, Schema> | undefined;

/**
 * The schema of an object: a custom resource's openAPIV3Schema (`custom`, its metadata an ObjectMeta as
 * apiextensions-apiserver publishes it), else the built-in kind's published one, by apiVersion and kind.
 */
function schemaOf(o: K8sObject | undefined, custom?: Schema): Schema | undefined {
  if (!byGvk) {
    definitions = loadDefinitions() as Record<string, Schema>;
    byGvk = new Map();
    for (const s of Object.values(definitions))
      for (const g of (s['x-kubernetes-group-version-kind'] as Schema[] | undefined) ?? [])
        byGvk.set(`${g.group ? `${g.group}/` : ''}${g.version}/${g.kind}`, s);
  }
  if (custom) {
    const metadata = { $ref: '#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta' };
    return { ...custom, properties: { ...(custom.properties as Schema | undefined), metadata } };
  }
  return byGvk.get(`${o?.apiVersion}/${o?.kind}`);
}

function resolve(s: Schema | undefined): Schema | undefined {
  let cur = s;
  for (let hops = 0; cur && hops < 8; hops++) {
    const allOf = cur.allOf as Schema[] | undefined;
    const ref = typeof cur.$ref === 'string' ? cur.$ref : allOf?.length === 1 ? allOf[0].$ref : undefined;
    if (typeof ref !== 'string') return cur;
    cur = definitions?.[ref.replace(/^#\/(definitions|components\/schemas)\//, '')];
  }
  return cur;
}

function fieldSchema(s: Schema | undefined, name: string): { schema?: Schema; structField: boolean } {
  const props = s?.properties as Record<string, Schema> | undefined;
  if (props?.[name]) return { schema: resolve(props[name]), structField: true };
  const extra = s?.additionalProperties;
  return { schema: isMap(extra) ? resolve(extra) : undefined, structField: false };
}

type ListKind = { type: 'atomic' } | { type: 'set' } | { type: 'map'; keys: string[] };

/** How a list merges and is owned (kube-openapi pkg/schemaconv: list-type, else patch strategy merge). */
function listKind(s: Schema | undefined): ListKind {
  const type = s?.['x-kubernetes-list-type'];
  if (type === 'set') return { type: 'set' };
  if (type === 'map') return { type: 'map', keys: (s?.['x-kubernetes-list-map-keys'] as string[]) ?? [] };
  if (
    type === undefined &&
    String(s?.['x-kubernetes-patch-strategy'] ?? '')
      .split(',')
      .includes('merge')
  ) {
    const key = s?.['x-kubernetes-patch-merge-key'];
    return typeof key === 'string' ? { type: 'map', keys: [key] } : { type: 'set' };
  }
  return { type: 'atomic' };
}

const itemSchema = (s: Schema | undefined) => resolve(s?.items as Schema | undefined);
const atomicMap = (s: Schema | undefined) => s?.['x-kubernetes-map-type'] === 'atomic';

/**
 * Defaults of key fields that kube-apiserver's OpenAPI v3 carries and the v2 definitions here do not (a port's
 * protocol): a key field left out of an applied item takes its default (typed/helpers.go getAssociativeKeyDefault).
 */
const KEY_DEFAULTS: Record<string, Json> = { protocol: 'TCP' };

/** The path element of a list item: its key fields (sorted by name, as serialize-pe.go writes them), value or index. */
function itemElement(kind: ListKind, item: Json, index: number, s?: Schema): string {
  if (kind.type === 'set') return `v:${JSON.stringify(item)}`;
  if (kind.type === 'map' && isMap(item)) {
    const key: Record<string, Json> = {};
    const props = s?.properties as Record<string, Schema> | undefined;
    for (const k of [...kind.keys].sort()) {
      const v = item[k] ?? props?.[k]?.default ?? (props?.[k] ? KEY_DEFAULTS[k] : undefined);
      if (v !== undefined) key[k] = v;
    }
    return `k:${JSON.stringify(key)}`;
  }
  return `i:${index}`;
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

/**
 * The fields an object sets (tofieldset.go), without what the server owns (stripmeta.go) and without status, unless
 * the write is to the status subresource, which owns nothing else.
 */
function fieldSet(
  o: K8sObject | undefined,
  schema: Schema | undefined,
  subresource?: string,
  update = false,
): FieldSet {
  const out: FieldSet = new Map();
  if (!isMap(o)) return out;
  const add = (path: Path, leaf: boolean, value?: Json): void => {
    out.set(JSON.stringify(path), { path, leaf, value });
  };
  const walk = (v: Json, s: Schema | undefined, at: Path, structField: boolean): void => {
    if (Array.isArray(v)) {
      const kind = listKind(s);
      if (kind.type === 'atomic') {
        add(at, true, v);
        return;
      }
      const item = itemSchema(s);
      v.forEach((x, i) => {
        const p = [...at, itemElement(kind, x, i, item)];
        add(p, kind.type === 'set', x);
        if (kind.type === 'map') walk(x, item, p, true);
      });
      return;
    }
    if (!isMap(v) || atomicMap(s)) {
      add(at, true, v);
      return;
    }
    const entries = Object.entries(v).filter(([, x]) => x !== undefined);
    // compare.go also reports a map (not a struct) that appeared as a whole: an Update owns `f:labels` itself.
    const isMapType = !s?.properties && isMap(s?.additionalProperties);
    if (entries.length === 0 || !structField || (update && isMapType)) add(at, entries.length === 0, v);
    for (const [k, x] of entries) {
      if (at.length === 0 && (k === 'apiVersion' || k === 'kind')) continue;
      if (at.length === 0 && (k === 'status') !== (subresource === 'status')) continue;
      if (at.length === 1 && at[0] === 'f:metadata' && SERVER_META.has(k)) continue;
      const child = fieldSchema(s, k);
      walk(x, child.schema, [...at, `f:${k}`], child.structField || at.length === 0);
    }
  };
  walk(o, schema, [], true);
  out.delete('[]');
  out.delete('["f:metadata"]');
  return out;
}

/** Follows one path element into a value: a field, the list item with those keys or that value, an index. */
function step(v: Json, pe: string): { value: Json; parent: Json; at: string | number } | undefined {
  const body = pe.slice(2);
  if (pe.startsWith('f:')) return isMap(v) && body in v ? { value: v[body], parent: v, at: body } : undefined;
  if (!Array.isArray(v)) return undefined;
  let i = -1;
  if (pe.startsWith('i:')) i = Number(body);
  else if (pe.startsWith('v:')) i = v.findIndex((x) => same(x, JSON.parse(body)));
  else if (pe.startsWith('k:')) {
    const key = JSON.parse(body) as Record<string, Json>;
    i = v.findIndex((x) => isMap(x) && Object.entries(key).every(([k, kv]) => same(x[k], kv)));
  }
  return i >= 0 && i < v.length ? { value: v[i], parent: v, at: i } : undefined;
}

/** Removes a path; a map or list left empty by it goes too, as typed/remove.go leaves no empty container behind. */
function removeAt(o: Json, p: Path): void {
  const chain: { parent: Json; at: string | number }[] = [];
  let v = o;
  for (const pe of p) {
    const s = step(v, pe);
    if (!s) return;
    chain.push({ parent: s.parent, at: s.at });
    v = s.value;
  }
  for (const { parent, at } of chain.reverse()) {
    if (Array.isArray(parent)) parent.splice(at as number, 1);
    else delete (parent as Record<string, Json>)[at as string];
    const empty = Array.isArray(parent) ? parent.length === 0 : Object.keys(parent as object).length === 0;
    if (!empty || parent === o) return;
  }
}

/** typed/merge.go: the applied configuration over the live object, lists merged by kind and associative key. */
function merge(live: Json, config: Json, s: Schema | undefined): Json {
  if (Array.isArray(config)) {
    const kind = listKind(s);
    if (kind.type === 'atomic' || !Array.isArray(live)) return structuredClone(config);
    const item = itemSchema(s);
    const pe = (x: Json, i: number) => itemElement(kind, x, i, item);
    const fromConfig = new Map(config.map((x, i) => [pe(x, i), x]));
    const livePes = live.map(pe);
    // Items only the live object has stay where they were; the others take the configuration's order.
    const out: Json[] = [];
    let next = 0;
    const emitConfigUpTo = (stop: string | undefined) => {
      while (next < config.length) {
        const k = pe(config[next], next);
        const at = livePes.indexOf(k);
        out.push(at >= 0 ? merge(live[at], config[next], item) : structuredClone(config[next]));
        next++;
        if (k === stop) return;
      }
    };
    live.forEach((x, i) => {
      if (!fromConfig.has(livePes[i])) out.push(x);
      else if (out.every((o) => pe(o, -1) !== livePes[i])) emitConfigUpTo(livePes[i]);
    });
    emitConfigUpTo(undefined);
    return out;
  }
  if (!isMap(config)) return structuredClone(config);
  if (!isMap(live) || atomicMap(s)) return structuredClone(config);
  const out: Record<string, Json> = { ...live };
  for (const [k, v] of Object.entries(config)) {
    if (v === null) delete out[k];
    else out[k] = merge(live[k], v, fieldSchema(s, k).schema);
  }
  return out;
}

function fromFieldsV1(f: Json, at: Path = [], out = new Map<string, Path>()): Map<string, Path> {
  if (!isMap(f)) return out;
  const children = Object.keys(f).filter((k) => k !== '.');
  if (at.length > 0 && (children.length === 0 || '.' in f)) out.set(JSON.stringify(at), at);
  for (const k of children) fromFieldsV1(f[k], [...at, k], out);
  return out;
}

/**
 * FieldsV1: a tree of path elements; a member that also has members below it is marked with `.`, written first, the
 * path elements after it in order (fieldpath/serialize.go emitContentsV1).
 */
function toFieldsV1(paths: Iterable<Path>): Record<string, Json> {
  const root: Record<string, Json> = {};
  const members: Record<string, Json>[] = [];
  for (const p of paths) {
    let node = root;
    for (const k of p) {
      node[k] ??= {};
      node = node[k] as Record<string, Json>;
    }
    members.push(node);
  }
  for (const node of members) if (Object.keys(node).some((k) => k !== '.')) node['.'] = {};
  const ordered = (node: Record<string, Json>): Record<string, Json> =>
    Object.fromEntries(
      Object.keys(node)
        .sort((x, y) => (x === '.' ? -1 : y === '.' ? 1 : x < y ? -1 : x > y ? 1 : 0))
        .map((k) => [k, ordered(node[k] as Record<string, Json>)]),
    );
  return ordered(root);
}

function ownersOf(managedFields: Json): Owner[] {
  const entries = Array.isArray(managedFields) ? (managedFields as Record<string, Json>[]) : [];
  return entries
    .filter((e) => isMap(e) && e.manager !== undefined)
    .map((e) => ({
      manager: String(e.manager ?? ''),
      operation: e.operation === 'Apply' ? 'Apply' : 'Update',
      apiVersion: e.apiVersion as string | undefined,
      time: e.time as string | undefined,
      subresource: (e.subresource as string | undefined) || undefined,
      paths: fromFieldsV1(e.fieldsV1),
    }));
}

function withOwners(o: K8sObject, owners: Owner[]): K8sObject {
  const kept = owners.filter((w) => w.paths.size > 0);
  o.metadata = {
    ...o.metadata,
    managedFields: kept.length
      ? kept.map((w) => ({
          manager: w.manager,
          operation: w.operation,
          apiVersion: w.apiVersion,
          time: w.time,
          fieldsType: 'FieldsV1',
          fieldsV1: toFieldsV1(w.paths.values()),
          ...(w.subresource ? { subresource: w.subresource } : {}),
        }))
      : undefined,
  };
  return o;
}

/** fieldpath/element.go's String: `.spec.containers[name="app"].image`, `[=x]` for a set item, `[0]` an index. */
function printPath(p: Path): string {
  return p
    .map((pe) => {
      const body = pe.slice(2);
      if (pe.startsWith('f:')) return `.${body}`;
      if (pe.startsWith('v:')) return `[=${body}]`;
      if (pe.startsWith('i:')) return `[${body}]`;
      const key = JSON.parse(body) as Record<string, Json>;
      return `[${Object.entries(key)
        .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
        .join(',')}]`;
    })
    .join('');
}

function printManager(o: Owner): string {
  const name = o.subresource ? `"${o.manager}" with subresource "${o.subresource}"` : `"${o.manager}"`;
  if (o.operation === 'Apply') return name;
  return `${name} using ${o.apiVersion ?? 'v1'}${o.time ? ` at ${o.time}` : ''}`;
}

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

/** typed/compare.go: members that appeared, changed leaves, members that went (with what was under them). */
function compare(before: FieldSet, after: FieldSet) {
  const added = new Set([...after.keys()].filter((k) => !before.has(k)));
  const modified = new Set(
    [...after].filter(([k, f]) => f.leaf && before.has(k) && !same(before.get(k)?.value, f.value)).map(([k]) => k),
  );
  const removed = new Set([...before.keys()].filter((k) => !after.has(k)));
  return { added, modified, removed };
}

/**
 * merge/update.go update(): the other managers of changed fields conflict (unless `force`, then they lose them), and
 * every manager loses the fields that went away.
 */
function settle(
  owners: Owner[],
  self: Owner,
  changes: ReturnType<typeof compare>,
  paths: FieldSet,
  force: boolean,
  allowed?: Set<string>,
): void {
  const conflicts: { owner: Owner; key: string; path: Path }[] = [];
  for (const owner of owners) {
    if (owner === self) continue;
    for (const k of owner.paths.keys())
      if (changes.added.has(k) || changes.modified.has(k))
        conflicts.push({ owner, key: k, path: paths.get(k)?.path ?? (owner.paths.get(k) as Path) });
  }
  const refused = force ? [] : conflicts.filter((c) => !allowed?.has(c.key));
  if (refused.length > 0) throw conflictError(refused);
  for (const c of conflicts) c.owner.paths.delete(c.key);
  for (const o of owners) if (o !== self) for (const k of changes.removed) o.paths.delete(k);
}

const versionOf = (o: K8sObject | undefined) => String(o?.apiVersion ?? 'v1');

/**
 * Server-side apply of `config` by `manager` to `live` (undefined on create): merges it by the kind's schema, prunes
 * what this manager applied before and nobody owns now, refuses with 409 a change to a field another manager owns
 * unless `force` (which hands the field over). Returns the object to store, its managedFields set.
 */
export function applyConfig(
  live: K8sObject | undefined,
  config: K8sObject,
  manager: string,
  force: boolean,
  custom?: Schema,
): K8sObject {
  const schema = schemaOf(config, custom) ?? schemaOf(live);
  const merged = merge(live ?? {}, config, schema) as K8sObject;
  let owners = ownersOf(live?.metadata?.managedFields);
  const before = fieldSet(live, schema);
  if (live && owners.length === 0 && before.size > 0) {
    // skipnonapplied.go: fields set before the first apply belong to "before-first-apply".
    const paths = keys(before);
    owners = [
      { manager: 'before-first-apply', operation: 'Update', apiVersion: versionOf(live), time: nowTime(), paths },
    ];
  }
  const previous = owners.find((o) => o.manager === manager && o.operation === 'Apply');
  const self: Owner = {
    manager,
    operation: 'Apply',
    apiVersion: versionOf(config),
    time: nowTime(),
    paths: keys(fieldSet(config, schema)),
  };
  owners = [...owners.filter((o) => o !== previous), self];
  if (previous) prune(merged, previous, owners);
  const after = fieldSet(merged, schema);
  const allowed = manager === 'kubectl' && !force ? fromLastApplied(live, schema, before) : undefined;
  settle(owners, self, compare(before, after), after, force, allowed);
  if (manager === 'kubectl' && live?.metadata?.annotations?.[LAST_APPLIED]) {
    // lastappliedupdater.go: kubectl's apply keeps the client-side annotation in step, so a later client-side apply
    // diffs against what was applied.
    const { [LAST_APPLIED]: _, ...annotations } = config.metadata?.annotations ?? {};
    const applied = { ...config, metadata: { ...config.metadata, annotations } };
    merged.metadata.annotations = {
      ...merged.metadata.annotations,
      [LAST_APPLIED]: `${JSON.stringify(sortKeys(applied))}\n`,
    };
  }
  return withOwners(merged, owners);
}

const LAST_APPLIED = 'kubectl.kubernetes.io/last-applied-configuration';

/**
 * lastappliedmanager.go: the fields of the client-side apply annotation that still hold their live value, which the
 * manager "kubectl" may take over without a conflict (the move from client-side to server-side apply).
 */
function fromLastApplied(live: K8sObject | undefined, schema: Schema | undefined, liveSet: FieldSet): Set<string> {
  const text = live?.metadata?.annotations?.[LAST_APPLIED];
  let last: K8sObject;
  try {
    last = JSON.parse(String(text ?? ''));
  } catch {
    return new Set();
  }
  if (!isMap(last) || last.apiVersion !== live?.apiVersion) return new Set();
  const held = [...fieldSet(last, schema)].filter(
    ([k, f]) => liveSet.has(k) && (!f.leaf || same(f.value, liveSet.get(k)?.value)),
  );
  return new Set(held.map(([k]) => k));
}

function sortKeys(v: Json): Json {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (!isMap(v)) return v;
  return Object.fromEntries(
    Object.keys(v)
      .sort()
      .map((k) => [k, sortKeys(v[k])]),
  );
}

const keys = (f: FieldSet) => new Map([...f].map(([k, v]) => [k, v.path]));

/** merge/update.go prune(): what the applier applied last time and no manager owns now (nor anything under it). */
function prune(merged: K8sObject, previous: Owner, owners: Owner[]): void {
  // Every owned path and all the paths above it: what is (or holds something) someone owns.
  const held = new Set<string>();
  for (const o of owners)
    for (const p of o.paths.values()) for (let i = 1; i <= p.length; i++) held.add(JSON.stringify(p.slice(0, i)));
  const gone = [...previous.paths].filter(([k]) => !held.has(k)).sort((a, b) => a[1].length - b[1].length);
  for (const [, p] of gone) removeAt(merged, p);
}

/**
 * An Update (any write but apply, merge/update.go Update()): `manager` comes to own what it added or changed, every
 * manager loses what it removed. `next.metadata.managedFields`, when the client sent some, replace the live ones
 * (decodeLiveOrNew). An object tracked by nobody stays so until its first apply (skipnonapplied.go). Returns `next`.
 */
export function recordUpdate(
  live: K8sObject | undefined,
  next: K8sObject,
  manager: string,
  subresource?: string,
  custom?: Schema,
): K8sObject {
  const sent = subresource ? undefined : next.metadata?.managedFields;
  let owners = ownersOf(Array.isArray(sent) && sent.length > 0 ? sent : live?.metadata?.managedFields);
  if (live && owners.length === 0) return withOwners(next, []);
  const schema = schemaOf(next, custom);
  const before = fieldSet(live, schema, subresource, true);
  const after = fieldSet(next, schema, subresource, true);
  const changes = compare(before, after);
  const apiVersion = versionOf(next);
  const found = owners.find(
    (o) =>
      o.manager === manager && o.operation === 'Update' && o.apiVersion === apiVersion && o.subresource === subresource,
  );
  const self: Owner = found ?? { manager, operation: 'Update', apiVersion, subresource, paths: new Map() };
  if (!found) owners = [...owners, self];
  settle(owners, self, changes, after, true);
  for (const k of changes.removed) self.paths.delete(k);
  for (const k of [...changes.added, ...changes.modified]) self.paths.set(k, after.get(k)?.path as Path);
  if (changes.added.size + changes.modified.size + changes.removed.size > 0) self.time = nowTime();
  return withOwners(next, owners);
}
