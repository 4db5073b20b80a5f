// What a shadowed write would change: the leaf paths that differ between the object before and after, one line each
// (`spec.replicas: 2 → 3`), for the TUI's diff line and plain output. Bookkeeping fields are left out.
/** Fields every write changes (or the server fills in): not what the local command meant to change. */
const BOOKKEEPING = new Set([
  'metadata.resourceVersion',
  'metadata.managedFields',
  'metadata.generation',
  'metadata.uid',
  'metadata.creationTimestamp',
  'metadata.selfLink',
]);
/** Longest value shown in a change; longer ones are cut with an ellipsis. */
const MAX_VALUE_CHARS = 40;

/** The changes from `before` to `after`, at most `max` (then `… N more`). null/undefined = the object did not exist. */
export function objectChanges(before: unknown, after: unknown, max = 5): string[] {
  if (before === undefined && after === undefined) return [];
  if (before === null || before === undefined) return after ? ['created'] : [];
  if (after === null) return ['deleted'];
  if (after === undefined) return [];
  const changes: string[] = [];
  walk(before, after, '', changes);
  return changes.length > max ? [...changes.slice(0, max), `… ${changes.length - max} more`] : changes;
}

function walk(a: unknown, b: unknown, path: string, out: string[]): void {
  if (BOOKKEEPING.has(path)) return;
  if (isObject(a) && isObject(b)) {
    for (const key of new Set([...Object.keys(a), ...Object.keys(b)])) {
      walk(a[key], b[key], path ? `${path}.${key}` : key, out);
    }
    return;
  }
  // Lists by position (containers[0].image), so a changed field of one item reads as that field.
  if (Array.isArray(a) && Array.isArray(b) && JSON.stringify(a) !== JSON.stringify(b)) {
    for (let i = 0; i < Math.max(a.length, b.length); i += 1) walk(a[i], b[i], `${path}[${i}]`, out);
    return;
  }
  if (JSON.stringify(a) === JSON.stringify(b)) return;
  out.push(`${path}: ${show(a)} → ${show(b)}`);
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function show(v: unknown): string {
  if (v === undefined) return '∅';
  const text = JSON.stringify(v);
  return text.length > MAX_VALUE_CHARS ? `${text.slice(0, MAX_VALUE_CHARS - 1)}…` : text;
}
