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

export function parseFieldSelector(s: string | undefined): Matcher {
  if (!s) return () => true;
  const reqs = splitTop(s).map((term) => {
    const m = /^([A-Za-z0-9_.-]+)\s*(==|=|!=)\s*(.*)$/.exec(term);
    if (!m) throw badRequest(`invalid selector: '${s}'; can't understand '${term}'`);
    return { path: m[1], neg: m[2] === '!=', value: m[3] };
  });
  return (obj) => reqs.every((r) => (fieldValue(obj, r.path) === r.value) !== r.neg);
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
