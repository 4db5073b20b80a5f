// What `devop exec --record` leaves out of a HAR unless --record-secrets is given: credential headers (Authorization,
// cookies, the aggregator's X-Remote-* identity) and the values of Secrets (and minted tokens) in JSON bodies, such as
// the whole Secret an AdmissionReview carries in request.object and request.oldObject.
import type { HarEntry, HarHeader } from './har-entry.js';

/** What a redacted value becomes: it says what happened and which flag keeps it. */
export const REDACTED = '<redacted by devop; --record-secrets keeps it>';

/** Headers that carry a credential or an identity the receiver trusts (the aggregator's front-proxy headers). */
const SECRET_HEADERS = new Set([
  'authorization',
  'proxy-authorization',
  'cookie',
  'set-cookie',
  'x-remote-user',
  'x-remote-group',
  'x-api-key',
  'x-auth-token',
]);
/** kube-aggregator's X-Remote-Extra-<key> headers (k8s.io/apiserver pkg/authentication/request/headerrequest). */
const SECRET_HEADER_PREFIXES = ['x-remote-extra-'];

export function isSecretHeader(name: string): boolean {
  const lower = name.toLowerCase();
  return SECRET_HEADERS.has(lower) || SECRET_HEADER_PREFIXES.some((prefix) => lower.startsWith(prefix));
}

/** Headers with every credential value replaced by REDACTED; the names of those replaced. */
export function redactHeaders(headers: readonly HarHeader[]): { headers: HarHeader[]; redacted: string[] } {
  const redacted: string[] = [];
  const out = headers.map((header) => {
    if (!isSecretHeader(header.name)) return header;
    redacted.push(header.name.toLowerCase());
    return { name: header.name, value: REDACTED };
  });
  return { headers: out, redacted: [...new Set(redacted)] };
}

type Json = Record<string, unknown>;

function isObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function maskValues(map: unknown): unknown {
  if (!isObject(map)) return map;
  return Object.fromEntries(Object.keys(map).map((key) => [key, REDACTED]));
}

/**
 * A JSON value with every Secret's data/stringData values and every TokenRequest's token replaced (at any depth: a
 * Secret, a SecretList's items, an AdmissionReview's object and oldObject, a Table row's object, a watch event).
 * Returns undefined when nothing was replaced.
 */
export function redactJson(value: unknown): unknown {
  let changed = false;
  const walk = (node: unknown, inSecretList = false): unknown => {
    if (Array.isArray(node)) return node.map((item) => walk(item, inSecretList));
    if (!isObject(node)) return node;
    const out: Json = {};
    const isSecret = node.kind === 'Secret' || (inSecretList && node.kind === undefined);
    for (const [key, child] of Object.entries(node)) {
      if (isSecret && (key === 'data' || key === 'stringData') && isObject(child)) {
        out[key] = maskValues(child);
        changed ||= Object.keys(child).length > 0;
      } else if (node.kind === 'TokenRequest' && key === 'status' && isObject(child) && 'token' in child) {
        out[key] = { ...child, token: REDACTED };
        changed = true;
      } else {
        out[key] = walk(child, key === 'items' && node.kind === 'SecretList');
      }
    }
    return out;
  };
  const result = walk(value);
  return changed ? result : undefined;
}

/** Text that names a Secret (or a token) but could not be read as JSON (cut at the HAR bound). */
const NAMES_SECRET_KIND = /"kind"\s*:\s*"(Secret|SecretList|TokenRequest)"/;
/** Bytes (protobuf, another encoding) that may hold one: the kind's name is in them as plain bytes. */
const BYTES_NAME_SECRET_KIND = /Secret|TokenRequest/;

function redactJsonText(text: string): { text: string; redacted: boolean } | undefined {
  try {
    const redacted = redactJson(JSON.parse(text));
    return redacted === undefined ? { text, redacted: false } : { text: JSON.stringify(redacted), redacted: true };
  } catch {
    // A watch stream is one JSON object per line.
  }
  const lines = text.split('\n');
  if (lines.length < 2) return undefined;
  let redacted = false;
  const out: string[] = [];
  for (const line of lines) {
    if (line.trim() === '') {
      out.push(line);
      continue;
    }
    const one = redactJsonText(line);
    if (!one) return undefined;
    redacted ||= one.redacted;
    out.push(one.text);
  }
  return { text: redacted ? out.join('\n') : text, redacted };
}

/**
 * A body as the HAR keeps it: JSON (or a watch stream of it) with Secret values replaced; a body that names a Secret
 * but cannot be read as JSON (cut, protobuf) is replaced whole, since its secret parts cannot be told apart.
 */
export function redactBody(text: string, encoding: 'base64' | undefined): { text: string; redacted: boolean } {
  if (encoding === 'base64') {
    // The caller drops the base64 mark of a body replaced whole (REDACTED is text).
    const bytes = Buffer.from(text, 'base64').toString('latin1');
    return BYTES_NAME_SECRET_KIND.test(bytes) ? { text: REDACTED, redacted: true } : { text, redacted: false };
  }
  const json = redactJsonText(text);
  if (json) return json;
  return NAMES_SECRET_KIND.test(text) ? { text: REDACTED, redacted: true } : { text, redacted: false };
}

/** An entry with its credentials redacted, and `_redacted` naming what was (absent when nothing was). Pure. */
export function redactEntry(entry: HarEntry): HarEntry {
  const what: string[] = [];
  const request = redactHeaders(entry.request.headers);
  const response = redactHeaders(entry.response.headers);
  const trailers = entry.response._trailers ? redactHeaders(entry.response._trailers) : undefined;
  what.push(...request.redacted.map((name) => `request header ${name}`));
  what.push(...response.redacted.map((name) => `response header ${name}`));
  what.push(...(trailers?.redacted ?? []).map((name) => `response trailer ${name}`));
  let postData = entry.request.postData;
  if (postData) {
    const body = redactBody(postData.text, postData._encoding);
    if (body.redacted) {
      what.push('request body Secret values');
      const { _encoding, ...rest } = postData;
      postData = { ...rest, text: body.text, ...(body.text !== REDACTED && _encoding ? { _encoding } : {}) };
    }
  }
  let content = entry.response.content;
  const answer = redactBody(content.text, content.encoding);
  if (answer.redacted) {
    what.push('response body Secret values');
    const { encoding, ...rest } = content;
    content = { ...rest, text: answer.text, ...(answer.text !== REDACTED && encoding ? { encoding } : {}) };
  }
  if (what.length === 0) return entry;
  return {
    ...entry,
    request: { ...entry.request, headers: request.headers, ...(postData ? { postData } : {}) },
    response: {
      ...entry.response,
      headers: response.headers,
      content,
      ...(trailers ? { _trailers: trailers.headers } : {}),
    },
    _redacted: what,
  };
}
