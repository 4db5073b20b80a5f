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

// Go's generated marshallers always write non-pointer fields; "" / false / 0 there mean "unset" (omitempty in JSON).
const str = (f: Fields, n: number): string | undefined => {
  const v = f.get(n)?.[0];
  return Buffer.isBuffer(v) && v.length > 0 ? v.toString('utf8') : undefined;
};
const msg = (f: Fields, n: number): Fields | undefined => {
  const v = f.get(n)?.[0];
  return Buffer.isBuffer(v) ? fields(v) : undefined;
};

const strs = (f: Fields, n: number): string[] =>
  (f.get(n) ?? []).filter(Buffer.isBuffer).map((b) => (b as Buffer).toString('utf8'));

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
  return v === 1 ? true : undefined;
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

/** A pointer field (*int32/*int64): present means set, 0 included. */
const num = (f: Fields, n: number): number | undefined => {
  const v = f.get(n)?.[0];
  return typeof v === 'number' ? v : undefined;
};
/** A non-pointer int: 0 means unset. */
const numNZ = (f: Fields, n: number): number | undefined => num(f, n) || undefined;
const msgs = (f: Fields, n: number): Fields[] =>
  (f.get(n) ?? []).filter(Buffer.isBuffer).map((b) => fields(b as Buffer));

function labelSelector(f: Fields | undefined): K8sObject | undefined {
  return f ? withoutUndefined({ matchLabels: stringMap(f, 1) }) : undefined;
}

/** IntOrString {type = 1 (0 int, 1 string), intVal = 2, strVal = 3}. */
function intOrString(f: Fields | undefined): number | string | undefined {
  if (!f) return undefined;
  return num(f, 1) === 1 ? str(f, 3) : numNZ(f, 2);
}

function container(f: Fields): K8sObject {
  const list = (n: number) => {
    const v = strs(f, n);
    return v.length ? v : undefined;
  };
  const ports = msgs(f, 6).map((p) =>
    withoutUndefined({ name: str(p, 1), hostPort: numNZ(p, 2), containerPort: numNZ(p, 3), protocol: str(p, 4) }),
  );
  const env = msgs(f, 7).map((e) => withoutUndefined({ name: str(e, 1), value: str(e, 2) }));
  return withoutUndefined({
    name: str(f, 1),
    image: str(f, 2),
    command: list(3),
    args: list(4),
    workingDir: str(f, 5),
    ports: ports.length ? ports : undefined,
    env: env.length ? env : undefined,
    resources: {},
    terminationMessagePath: str(f, 13),
    imagePullPolicy: str(f, 14),
    stdin: bool(f, 16),
    tty: bool(f, 18),
    terminationMessagePolicy: str(f, 20),
  });
}

function podSpec(f: Fields | undefined): K8sObject | undefined {
  if (!f) return undefined;
  const init = msgs(f, 20).map(container);
  return withoutUndefined({
    containers: msgs(f, 2).map(container),
    restartPolicy: str(f, 3),
    terminationGracePeriodSeconds: num(f, 4),
    activeDeadlineSeconds: num(f, 5),
    dnsPolicy: str(f, 6),
    nodeSelector: stringMap(f, 7),
    serviceAccountName: str(f, 8),
    nodeName: str(f, 10),
    hostNetwork: bool(f, 11),
    hostPID: bool(f, 12),
    schedulerName: str(f, 19),
    initContainers: init.length ? init : undefined,
  });
}

function podTemplate(f: Fields | undefined): K8sObject | undefined {
  return f ? withoutUndefined({ metadata: objectMeta(msg(f, 1)), spec: podSpec(msg(f, 2)) }) : undefined;
}

const DECODERS: Record<string, (raw: Fields) => K8sObject> = {
  // `kubectl create deployment|job|service` (kubectl ≥ 1.32 sends them as protobuf): the fields those generators set.
  'apps/v1/Deployment': (f) => {
    const spec = msg(f, 2) ?? new Map();
    const strategy = msg(spec, 4);
    return withoutUndefined({
      metadata: objectMeta(msg(f, 1)),
      spec: withoutUndefined({
        replicas: num(spec, 1),
        selector: labelSelector(msg(spec, 2)),
        template: podTemplate(msg(spec, 3)),
        strategy: strategy && str(strategy, 1) ? { type: str(strategy, 1) } : undefined,
        minReadySeconds: numNZ(spec, 5),
        revisionHistoryLimit: num(spec, 6),
        paused: bool(spec, 7),
        progressDeadlineSeconds: num(spec, 9),
      }),
    });
  },
  'batch/v1/Job': (f) => {
    const spec = msg(f, 2) ?? new Map();
    return withoutUndefined({
      metadata: objectMeta(msg(f, 1)),
      spec: withoutUndefined({
        parallelism: num(spec, 1),
        completions: num(spec, 2),
        activeDeadlineSeconds: num(spec, 3),
        selector: labelSelector(msg(spec, 4)),
        manualSelector: bool(spec, 5),
        template: podTemplate(msg(spec, 6)),
        backoffLimit: num(spec, 7),
        ttlSecondsAfterFinished: num(spec, 8),
        completionMode: str(spec, 9),
        suspend: bool(spec, 10),
      }),
    });
  },
  'v1/Service': (f) => {
    const spec = msg(f, 2) ?? new Map();
    const ports = msgs(spec, 1).map((p) =>
      withoutUndefined({
        name: str(p, 1),
        protocol: str(p, 2),
        port: numNZ(p, 3),
        targetPort: intOrString(msg(p, 4)),
        nodePort: numNZ(p, 5),
      }),
    );
    return withoutUndefined({
      metadata: objectMeta(msg(f, 1)),
      spec: withoutUndefined({
        ports: ports.length ? ports : undefined,
        selector: stringMap(spec, 2),
        clusterIP: str(spec, 3),
        type: str(spec, 4),
      }),
    });
  },
  'authorization.k8s.io/v1/SelfSubjectAccessReview': (f) => {
    const spec = msg(f, 2);
    const out: K8sObject = { metadata: objectMeta(msg(f, 1)), spec: {} };
    const ra = spec && msg(spec, 1);
    const nra = spec && msg(spec, 2);
    if (ra) out.spec.resourceAttributes = resourceAttributes(ra);
    if (nra) out.spec.nonResourceAttributes = { path: str(nra, 1) ?? '', verb: str(nra, 2) ?? '' };
    return out;
  },
  'authorization.k8s.io/v1/SelfSubjectRulesReview': (f) => ({
    metadata: objectMeta(msg(f, 1)),
    spec: { namespace: str(msg(f, 2) ?? new Map(), 1) ?? '' },
  }),
  'authentication.k8s.io/v1/SelfSubjectReview': (f) => ({ metadata: objectMeta(msg(f, 1)) }),
  // The kinds `kubectl create namespace|configmap|secret|serviceaccount` send as protobuf from kubectl 1.32 on.
  'v1/Namespace': (f) =>
    withoutUndefined({ metadata: objectMeta(msg(f, 1)), spec: { finalizers: strs(msg(f, 2) ?? new Map(), 1) } }),
  'v1/ConfigMap': (f) =>
    withoutUndefined({
      metadata: objectMeta(msg(f, 1)),
      data: stringMap(f, 2),
      binaryData: stringMap(f, 3, true),
      immutable: bool(f, 4),
    }),
  'v1/Secret': (f) =>
    withoutUndefined({
      metadata: objectMeta(msg(f, 1)),
      data: stringMap(f, 2, true),
      type: str(f, 3),
      stringData: stringMap(f, 4),
      immutable: bool(f, 5),
    }),
  'authentication.k8s.io/v1/TokenRequest': (f) => {
    const spec = msg(f, 2) ?? new Map();
    const seconds = spec.get(4)?.[0];
    return withoutUndefined({
      metadata: objectMeta(msg(f, 1)),
      spec: withoutUndefined({
        audiences: strs(spec, 1),
        expirationSeconds: typeof seconds === 'number' ? seconds : undefined,
      }),
    });
  },
  'v1/ServiceAccount': (f) =>
    withoutUndefined({ metadata: objectMeta(msg(f, 1)), automountServiceAccountToken: bool(f, 4) }),
};

/** Decodes a protobuf request body; kinds the stand-in has no decoder for get 415, naming what to send instead. */
export function decodeProtobuf(body: Buffer): K8sObject {
  if (!body.subarray(0, 4).equals(MAGIC))
    throw new ApiError(400, 'BadRequest', 'protobuf body without the k8s envelope');
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
    throw new ApiError(
      415,
      'UnsupportedMediaType',
      `the stand-in cluster does not decode protobuf ${kind} (${apiVersion}) bodies; send application/json`,
    );
  }
  return { apiVersion, kind, ...decode(raw) };
}
