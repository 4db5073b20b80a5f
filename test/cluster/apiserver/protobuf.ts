// The Kubernetes protobuf envelope ("k8s\0" + runtime.Unknown) and decoders for the request bodies kubectl's typed
// clients send as protobuf to built-in kinds the stand-in must understand (the access/rules/self reviews).
import { ApiError, type K8sObject } from './errors.js';

export const PROTOBUF_CONTENT_TYPE = 'application/vnd.kubernetes.protobuf';
const MAGIC = Buffer.from([0x6b, 0x38, 0x73, 0x00]);

type Fields = Map<number, (Buffer | number)[]>;

function readVarint(buf: Buffer, pos: number): [number, number] {
  let result = 0;
  let shift = 0;
  for (;;) {
    if (pos >= buf.length) throw new Error('truncated varint');
    const b = buf[pos++];
    result += (b & 0x7f) * 2 ** shift;
    if ((b & 0x80) === 0) return [result, pos];
    shift += 7;
  }
}

/** Splits a protobuf message into its fields (length-delimited values as Buffers, varints as numbers). */
function fields(buf: Buffer): Fields {
  const out: Fields = new Map();
  let pos = 0;
  while (pos < buf.length) {
    let key: number;
    [key, pos] = readVarint(buf, pos);
    const field = Math.floor(key / 8);
    const wire = key & 7;
    let value: Buffer | number;
    if (wire === 0) [value, pos] = readVarint(buf, pos);
    else if (wire === 2) {
      let len: number;
      [len, pos] = readVarint(buf, pos);
      value = buf.subarray(pos, pos + len);
      pos += len;
    } else if (wire === 1) {
      value = buf.subarray(pos, pos + 8);
      pos += 8;
    } else if (wire === 5) {
      value = buf.subarray(pos, pos + 4);
      pos += 4;
    } else throw new Error(`unsupported protobuf wire type ${wire}`);
    out.set(field, [...(out.get(field) ?? []), value]);
  }
  return out;
}

const str = (f: Fields, n: number): string | undefined => {
  const v = f.get(n)?.[0];
  return Buffer.isBuffer(v) ? v.toString('utf8') : undefined;
};
const msg = (f: Fields, n: number): Fields | undefined => {
  const v = f.get(n)?.[0];
  return Buffer.isBuffer(v) ? fields(v) : undefined;
};

const strs = (f: Fields, n: number): string[] => (f.get(n) ?? []).filter(Buffer.isBuffer).map((b) => (b as Buffer).toString('utf8'));

/** A map<string, string|bytes> field (repeated entries {key = 1, value = 2}); bytes values as base64, as in JSON. */
function stringMap(f: Fields, n: number, bytes = false): Record<string, string> | undefined {
  const entries = (f.get(n) ?? []).filter(Buffer.isBuffer).map((b) => fields(b as Buffer));
  if (entries.length === 0) return undefined;
  const out: Record<string, string> = {};
  for (const e of entries) {
    const v = e.get(2)?.[0];
    out[str(e, 1) ?? ''] = Buffer.isBuffer(v) ? (bytes ? v.toString('base64') : v.toString('utf8')) : '';
  }
  return out;
}

function objectMeta(f: Fields | undefined): K8sObject {
  if (!f) return {};
  const m: K8sObject = {};
  const name = str(f, 1);
  const generateName = str(f, 2);
  const namespace = str(f, 3);
  if (name) m.name = name;
  if (generateName) m.generateName = generateName;
  if (namespace) m.namespace = namespace;
  const labels = stringMap(f, 11);
  const annotations = stringMap(f, 12);
  if (labels) m.labels = labels;
  if (annotations) m.annotations = annotations;
  const finalizers = strs(f, 14);
  if (finalizers.length) m.finalizers = finalizers;
  return m;
}

const bool = (f: Fields, n: number): boolean | undefined => {
  const v = f.get(n)?.[0];
  return typeof v === 'number' ? v !== 0 : undefined;
};

function withoutUndefined(o: K8sObject): K8sObject {
  for (const k of Object.keys(o)) if (o[k] === undefined) delete o[k];
  return o;
}

function resourceAttributes(f: Fields): K8sObject {
  const names = ['', 'namespace', 'verb', 'group', 'version', 'resource', 'subresource', 'name'];
  const out: K8sObject = {};
  for (let i = 1; i < names.length; i++) {
    const v = str(f, i);
    if (v) out[names[i]] = v;
  }
  return out;
}

const DECODERS: Record<string, (raw: Fields) => K8sObject> = {
  'authorization.k8s.io/v1/SelfSubjectAccessReview': (f) => {
    const spec = msg(f, 2);
    const out: K8sObject = { metadata: objectMeta(msg(f, 1)), spec: {} };
    const ra = spec && msg(spec, 1);
    const nra = spec && msg(spec, 2);
    if (ra) out.spec.resourceAttributes = resourceAttributes(ra);
    if (nra) out.spec.nonResourceAttributes = { path: str(nra, 1) ?? '', verb: str(nra, 2) ?? '' };
    return out;
  },
  'authorization.k8s.io/v1/SelfSubjectRulesReview': (f) => ({ metadata: objectMeta(msg(f, 1)), spec: { namespace: str(msg(f, 2) ?? new Map(), 1) ?? '' } }),
  'authentication.k8s.io/v1/SelfSubjectReview': (f) => ({ metadata: objectMeta(msg(f, 1)) }),
  // The kinds `kubectl create namespace|configmap|secret|serviceaccount` send as protobuf from kubectl 1.32 on.
  'v1/Namespace': (f) => withoutUndefined({ metadata: objectMeta(msg(f, 1)), spec: { finalizers: strs(msg(f, 2) ?? new Map(), 1) } }),
  'v1/ConfigMap': (f) => withoutUndefined({ metadata: objectMeta(msg(f, 1)), data: stringMap(f, 2), binaryData: stringMap(f, 3, true), immutable: bool(f, 4) }),
  'v1/Secret': (f) => withoutUndefined({ metadata: objectMeta(msg(f, 1)), data: stringMap(f, 2, true), type: str(f, 3), stringData: stringMap(f, 4), immutable: bool(f, 5) }),
  'v1/ServiceAccount': (f) => withoutUndefined({ metadata: objectMeta(msg(f, 1)), automountServiceAccountToken: bool(f, 4) }),
};

/** Decodes a protobuf request body; kinds the stand-in has no decoder for get 415, naming what to send instead. */
export function decodeProtobuf(body: Buffer): K8sObject {
  if (!body.subarray(0, 4).equals(MAGIC)) throw new ApiError(400, 'BadRequest', 'protobuf body without the k8s envelope');
  let apiVersion = '';
  let kind = '';
  let raw: Fields;
  try {
    const unknown = fields(body.subarray(4));
    const typeMeta = msg(unknown, 1) ?? new Map();
    apiVersion = str(typeMeta, 1) ?? '';
    kind = str(typeMeta, 2) ?? '';
    raw = fields((unknown.get(2)?.[0] as Buffer) ?? Buffer.alloc(0));
  } catch (e) {
    throw new ApiError(400, 'BadRequest', `the body of the request could not be decoded: ${(e as Error).message}`);
  }
  const decode = DECODERS[`${apiVersion}/${kind}`];
  if (!decode) {
    throw new ApiError(415, 'UnsupportedMediaType', `the stand-in cluster does not decode protobuf ${kind} (${apiVersion}) bodies; send application/json`);
  }
  return { apiVersion, kind, ...decode(raw) };
}
