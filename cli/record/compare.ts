// How `devop replay` tells whether an answer matches the recorded one: the status, and the body — field by field for
// JSON (fields a server changes on its own, such as creationTimestamp, are left out), byte for byte otherwise.
import { bodyBytes, type HarEntry } from './har.js';

/** Fields every Kubernetes server fills in on its own, which differ between two runs of the same code. */
export const ALWAYS_IGNORED = ['creationTimestamp', 'resourceVersion', 'managedFields'] as const;
/** A replay line shows at most this many differing fields (then how many more). */
const MAX_DIFFERENCES = 12;
/** Values in a difference line are cut here. */
const MAX_VALUE_CHARS = 80;

export interface Answer {
  status: number;
  mimeType: string;
  body: Buffer;
  /** An HTTP/2 answer's trailers and its header's grpc-status (a trailers-only gRPC answer has it there). */
  grpc?: { status?: string; message?: string };
}

/** A gRPC call's grpc-status and grpc-message as recorded: in the trailers, or in a trailers-only answer's headers. */
export function recordedGrpc(recorded: HarEntry): { status?: string; message?: string } | undefined {
  const all = [...(recorded.response._trailers ?? []), ...recorded.response.headers];
  const value = (name: string) => all.find((h) => h.name.toLowerCase() === name)?.value;
  const status = value('grpc-status');
  return status === undefined ? undefined : { status, message: value('grpc-message') };
}

export interface Comparison {
  same: boolean;
  /** One line per difference: `status 200 → 404`, `spec.weight: 130 → 131`, `body: 120 bytes → 98 bytes`. */
  differences: string[];
  /** The recorded body was cut (HAR bound): only its first bytes were compared. */
  partial?: boolean;
}

function parseJson(bytes: Buffer): { ok: true; value: unknown } | { ok: false } {
  try {
    return { ok: true, value: JSON.parse(bytes.toString('utf8')) };
  } catch {
    return { ok: false };
  }
}

function show(value: unknown): string {
  const text = JSON.stringify(value) ?? 'undefined';
  return text.length > MAX_VALUE_CHARS ? `${text.slice(0, MAX_VALUE_CHARS - 1)}…` : text;
}

/** Whether a field is ignored: its name, or the end of its dotted path without list indexes (`metadata.uid`). */
function ignoredBy(ignore: readonly string[]): (path: readonly string[]) => boolean {
  return (path) => {
    const keys = path.filter((p) => !p.startsWith('['));
    const dotted = keys.join('.');
    return ignore.some((i) => dotted === i || dotted.endsWith(`.${i}`));
  };
}

function join(path: readonly string[]): string {
  return path.reduce((acc, p) => (p.startsWith('[') ? `${acc}${p}` : acc ? `${acc}.${p}` : p), '');
}

/** The differences between two JSON values, as `path: old → new` lines. Pure. */
export function jsonDifferences(before: unknown, after: unknown, ignore: readonly string[] = ALWAYS_IGNORED): string[] {
  const out: string[] = [];
  const ignored = ignoredBy(ignore);
  const walk = (a: unknown, b: unknown, path: string[]): void => {
    if (path.length > 0 && ignored(path)) return;
    if (Array.isArray(a) && Array.isArray(b)) {
      for (let i = 0; i < Math.max(a.length, b.length); i++) {
        const p = [...path, `[${i}]`];
        if (i >= a.length) out.push(`${join(p)}: added ${show(b[i])}`);
        else if (i >= b.length) out.push(`${join(p)}: removed (was ${show(a[i])})`);
        else walk(a[i], b[i], p);
      }
      return;
    }
    const isObject = (v: unknown): v is Record<string, unknown> =>
      typeof v === 'object' && v !== null && !Array.isArray(v);
    if (isObject(a) && isObject(b)) {
      for (const key of new Set([...Object.keys(a), ...Object.keys(b)])) {
        const p = [...path, key];
        if (ignored(p)) continue;
        if (!(key in b)) out.push(`${join(p)}: removed (was ${show(a[key])})`);
        else if (!(key in a)) out.push(`${join(p)}: added ${show(b[key])}`);
        else walk(a[key], b[key], p);
      }
      return;
    }
    if (JSON.stringify(a) !== JSON.stringify(b)) out.push(`${join(path) || 'body'}: ${show(a)} → ${show(b)}`);
  };
  walk(before, after, []);
  return out;
}

/** Compares a replayed answer with the recorded one. Pure. */
export function compareAnswer(recorded: HarEntry, got: Answer, ignore: readonly string[] = ALWAYS_IGNORED): Comparison {
  const differences: string[] = [];
  const was = recorded.response;
  if (was.status !== got.status) differences.push(`status ${was.status} → ${got.status}`);
  const grpc = recordedGrpc(recorded);
  if (grpc && grpc.status !== got.grpc?.status)
    differences.push(
      `grpc-status ${grpc.status} → ${got.grpc?.status ?? 'none'}${got.grpc?.message ? ` (${got.grpc.message})` : ''}`,
    );
  const content = was.content ?? { text: '', size: 0, mimeType: '' };
  const before = bodyBytes({ text: content.text ?? '', encoding: content.encoding });
  const partial = Boolean(content._cut);
  const after = partial ? got.body.subarray(0, before.length) : got.body;
  const a = parseJson(before);
  const b = parseJson(after);
  if (!partial && a.ok && b.ok) differences.push(...jsonBodyDifferences(a.value, b.value, ignore));
  else if (!before.equals(after))
    differences.push(`body: ${describeBody(before, content.mimeType)} → ${describeBody(got.body, got.mimeType)}`);
  const shown =
    differences.length > MAX_DIFFERENCES
      ? [...differences.slice(0, MAX_DIFFERENCES), `… and ${differences.length - MAX_DIFFERENCES} more`]
      : differences;
  return { same: differences.length === 0, differences: shown, ...(partial ? { partial } : {}) };
}

/**
 * Two objects of different kinds (a Table then a Status) are not compared field by field — every field would differ:
 * the kinds are named, and a Status's message, which says why.
 */
function jsonBodyDifferences(before: unknown, after: unknown, ignore: readonly string[]): string[] {
  const kindOf = (v: unknown): string | undefined =>
    typeof v === 'object' && v !== null && typeof (v as { kind?: unknown }).kind === 'string'
      ? (v as { kind: string }).kind
      : undefined;
  const [was, now] = [kindOf(before), kindOf(after)];
  if (was === undefined || now === undefined || was === now) return jsonDifferences(before, after, ignore);
  const message = (after as { message?: unknown }).message;
  return [`kind: ${show(was)} → ${show(now)}`, ...(now === 'Status' && message ? [`message: ${show(message)}`] : [])];
}

function describeBody(bytes: Buffer, mimeType: string): string {
  return `${bytes.length} bytes${mimeType ? ` of ${mimeType.split(';')[0]}` : ''}`;
}

interface AdmissionRequest {
  operation?: string;
  kind?: { group?: string; kind?: string };
  namespace?: string;
  name?: string;
}

/**
 * How a replay line names a request: `GET /path`, and for an AdmissionReview (a webhook call) what it asks about —
 * `AdmissionReview CREATE Deployment default/web` — since every such call goes to the same path.
 */
export function describeRequest(entry: HarEntry): string {
  const url = new URL(entry.request.url);
  const line = `${entry.request.method} ${url.pathname}${url.search}`;
  const post = entry.request.postData;
  if (!post?.text || post._encoding === 'base64') return line;
  const parsed = parseJson(Buffer.from(post.text, 'utf8'));
  if (!parsed.ok) return line;
  const review = parsed.value as { kind?: string; request?: AdmissionRequest } | null;
  if (review?.kind !== 'AdmissionReview') return line;
  const r = review.request ?? {};
  const what = [r.operation, r.kind?.kind, [r.namespace, r.name].filter(Boolean).join('/')].filter(Boolean).join(' ');
  return `${line} (AdmissionReview ${what || 'without a request'})`;
}
