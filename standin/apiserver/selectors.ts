// Label selectors (=, ==, !=, in, notin, exists, !exists), field selectors, and metav1.LabelSelector matching.
import { badRequest, type K8sObject } from './errors.js';

interface Requirement {
  key: string;
  op: 'in' | 'notin' | 'exists' | '!exists';
  values: string[];
}

export type Matcher = (obj: K8sObject) => boolean;

/** Splits on commas that are not inside parentheses. */
function splitTop(s: string): string[] {
  const parts: string[] = [];
  let depth = 0;
  let cur = '';
  for (const ch of s) {
    if (ch === '(') depth++;
    if (ch === ')') depth--;
    if (ch === ',' && depth === 0) {
      parts.push(cur);
      cur = '';
    } else cur += ch;
  }
  if (cur.trim() !== '') parts.push(cur);
  return parts.map((p) => p.trim()).filter((p) => p !== '');
}

function parseLabelRequirement(term: string): Requirement {
  let m = /^([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)$/.exec(term);
  if (m)
    return {
      key: m[1],
      op: m[2] as 'in' | 'notin',
      values: m[3]
        .split(',')
        .map((v) => v.trim())
        .filter((v) => v !== ''),
    };
  m = /^([^\s!=]+)\s*(==|=|!=)\s*([^\s]*)$/.exec(term);
  if (m) return { key: m[1], op: m[2] === '!=' ? 'notin' : 'in', values: [m[3]] };
  m = /^!\s*([^\s!=]+)$/.exec(term);
  if (m) return { key: m[1], op: '!exists', values: [] };
  m = /^([^\s!=(),]+)$/.exec(term);
  if (m) return { key: m[1], op: 'exists', values: [] };
  throw badRequest(`unable to parse requirement: found '${term}', expected: in, notin, =, ==, !=, gt, lt`);
}

function matchRequirement(labels: Record<string, string>, r: Requirement): boolean {
  const has = Object.hasOwn(labels, r.key);
  switch (r.op) {
    case 'exists':
      return has;
    case '!exists':
      return !has;
    case 'in':
      return has && r.values.includes(labels[r.key]);
    case 'notin':
      return !has || !r.values.includes(labels[r.key]);
  }
}

export function parseLabelSelector(s: string | undefined): Matcher {
  if (!s) return () => true;
  const reqs = splitTop(s).map(parseLabelRequirement);
  return (obj) => reqs.every((r) => matchRequirement(obj.metadata?.labels ?? {}, r));
}

/** A field path such as `spec.nodeName`, read from the object ('' when absent, as kube-apiserver compares). */
export function fieldValue(obj: K8sObject, path: string): string {
  let cur: any = obj;
  for (const part of path.split('.')) {
    if (cur == null) return '';
    cur = cur[part];
  }
  return cur == null ? '' : String(cur);
}

/**
 * The field labels a request may select on, by store key, and the message for any other, as kube-apiserver's field
 * label conversions have them (kubernetes pkg/apis/core/v1/conversion.go, pkg/apis/batch/v1/conversion.go). A core
 * kind without its own conversion falls back to metadata.name and metadata.namespace (apimachinery
 * pkg/runtime/conversion.go DefaultMetaV1FieldSelectorConversion). Other groups are not checked.
 */
const FIELD_LABELS: Record<string, { labels: string[]; refuse?: (label: string) => string }> = {
  '/pods': {
    labels: [
      'metadata.name',
      'metadata.namespace',
      'spec.nodeName',
      'spec.restartPolicy',
      'spec.schedulerName',
      'spec.serviceAccountName',
      'spec.hostNetwork',
      'status.phase',
      'status.podIP',
      'status.podIPs',
      'status.nominatedNodeName',
    ],
  },
  '/nodes': { labels: ['metadata.name', 'spec.unschedulable'] },
  '/replicationcontrollers': { labels: ['metadata.name', 'metadata.namespace', 'status.replicas'] },
  '/events': {
    labels: [
      'involvedObject.kind',
      'involvedObject.namespace',
      'involvedObject.name',
      'involvedObject.uid',
      'involvedObject.apiVersion',
      'involvedObject.resourceVersion',
      'involvedObject.fieldPath',
      'reason',
      'reportingComponent',
      'source',
      'type',
      'metadata.namespace',
      'metadata.name',
    ],
  },
  '/namespaces': { labels: ['status.phase', 'metadata.name'] },
  '/secrets': { labels: ['type', 'metadata.namespace', 'metadata.name'] },
  '/services': { labels: ['metadata.namespace', 'metadata.name', 'spec.clusterIP', 'spec.type'] },
  'batch/jobs': {
    labels: ['metadata.name', 'metadata.namespace', 'status.successful'],
    refuse: (label) => `field label "${label}" not supported for batchv1.Job`,
  },
};

/** Where a selectable field's value is read from when it is not the object path of the same name. */
const FIELD_PATHS: Record<string, Record<string, string>> = {
  '/pods': { 'spec.host': 'spec.nodeName' },
  '/events': { source: 'source.component' },
  'batch/jobs': { 'status.successful': 'status.succeeded' },
};

/** The value kube-apiserver selects a field by: an absent boolean reads "false", an absent count "0". */
const FIELD_DEFAULTS: Record<string, string> = {
  'spec.hostNetwork': 'false',
  'spec.unschedulable': 'false',
  'status.successful': '0',
  'status.replicas': '0',
};

/**
 * A fieldSelector for the resource under `key` (a store key; undefined checks no labels): an unsupported label is a
 * 400 with kube-apiserver's message, as apiserver pkg/endpoints/handlers/get.go answers a failed label conversion.
 */
export function parseFieldSelector(s: string | undefined, key?: string): Matcher {
  if (!s) return () => true;
  const core = key?.startsWith('/');
  const known = key === undefined ? undefined : FIELD_LABELS[key];
  const reqs = splitTop(s).map((term) => {
    const m = /^([A-Za-z0-9_.-]+)\s*(==|=|!=)\s*(.*)$/.exec(term);
    if (!m) throw badRequest(`invalid selector: '${s}'; can't understand '${term}'`);
    const label = m[1];
    const aliased = key === '/pods' && label === 'spec.host';
    if (known && !known.labels.includes(label) && !aliased)
      throw badRequest(known.refuse?.(label) ?? `field label not supported: ${label}`);
    if (!known && core && label !== 'metadata.name' && label !== 'metadata.namespace')
      throw badRequest(`"${label}" is not a known field selector: only "metadata.name", "metadata.namespace"`);
    const path = (key && FIELD_PATHS[key]?.[label]) ?? label;
    return { path, neg: m[2] === '!=', value: m[3], absent: FIELD_DEFAULTS[label] ?? '' };
  });
  return (obj) =>
    reqs.every((r) => {
      const v = fieldValue(obj, r.path);
      return ((v === '' ? r.absent : v) === r.value) !== r.neg;
    });
}

/** Matches a metav1.LabelSelector (matchLabels + matchExpressions). An empty selector matches everything. */
export function labelSelectorMatcher(sel: K8sObject | undefined): Matcher {
  if (!sel) return () => false;
  const reqs: Requirement[] = Object.entries(sel.matchLabels ?? {}).map(([key, v]) => ({
    key,
    op: 'in',
    values: [String(v)],
  }));
  for (const e of sel.matchExpressions ?? []) {
    const op = String(e.operator).toLowerCase();
    if (op === 'in' || op === 'notin') reqs.push({ key: e.key, op, values: e.values ?? [] });
    else if (op === 'exists') reqs.push({ key: e.key, op: 'exists', values: [] });
    else if (op === 'doesnotexist') reqs.push({ key: e.key, op: '!exists', values: [] });
  }
  return (obj) => reqs.every((r) => matchRequirement(obj.metadata?.labels ?? {}, r));
}

/** A Service's plain map selector. */
export function mapSelectorMatcher(sel: Record<string, string> | undefined): Matcher {
  if (!sel || Object.keys(sel).length === 0) return () => false;
  return (obj) => Object.entries(sel).every(([k, v]) => obj.metadata?.labels?.[k] === v);
}

/**
 * A boolean query parameter as kube-apiserver decodes ListOptions (apimachinery pkg/runtime/conversion.go
 * Convert_Slice_string_To_bool): absent, "0" or "false" (any case) is false, any other value is true — so
 * python3-kubernetes' `watch=True` is a watch.
 */
export function queryFlag(q: URLSearchParams, name: string): boolean {
  const v = q.get(name);
  return v !== null && v !== '0' && v.toLowerCase() !== 'false';
}
