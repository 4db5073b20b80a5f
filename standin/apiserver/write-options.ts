// The options of a write as kube-apiserver reads and validates them: DeleteOptions from a DELETE's body or query
// (k8s.io/apiserver pkg/endpoints/handlers/delete.go), dryRun of create/update/patch from the query, and apimachinery's
// pkg/apis/meta/v1/validation (ValidateDeleteOptions, ValidateDryRun) before anything is written.
import type { IncomingMessage } from 'node:http';
import { parse as parseYaml } from 'yaml';
import { ApiError, badRequest, invalid, type K8sObject } from './errors.js';
import type { DeleteOptions } from './objects.js';
import { decodeProtobuf, PROTOBUF_CONTENT_TYPE } from './protobuf.js';

/** kube-apiserver's default --max-request-bytes for a body it decodes (3 MiB). */
const MAX_BODY = 3 * 1024 * 1024;

/** The request's body bytes, bounded as kube-apiserver bounds them (limitedReadBody). */
export async function readRawBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size > MAX_BODY) throw new ApiError(413, 'RequestEntityTooLarge', 'Request entity too large: limit is 3145728');
    chunks.push(c as Buffer);
  }
  return Buffer.concat(chunks);
}

function decode(raw: Buffer, contentType: string): unknown {
  if (contentType.startsWith(PROTOBUF_CONTENT_TYPE)) return decodeProtobuf(raw);
  const text = raw.toString('utf8');
  try {
    return contentType.includes('yaml') ? parseYaml(text) : JSON.parse(text);
  } catch (e) {
    throw badRequest(`the body of the request could not be decoded: ${(e as Error).message}`);
  }
}

/**
 * A DELETE's body as delete.go reads it: none when it has no bytes (the query is then read), otherwise decoded —
 * whitespace or broken JSON is a 400, not "no body". JSON `null` decodes to empty DeleteOptions, as Go's decoder
 * leaves the struct untouched.
 */
export async function readDeleteBody(req: IncomingMessage): Promise<K8sObject | undefined> {
  const raw = await readRawBody(req);
  if (raw.length === 0) return undefined;
  const body = decode(raw, req.headers['content-type'] ?? '');
  if (body === null) return {};
  if (typeof body !== 'object' || Array.isArray(body))
    throw badRequest(`couldn't get version/kind; json parse error: cannot unmarshal ${typeName(body)} into an object`);
  return body as K8sObject;
}

const typeName = (v: unknown): string => (Array.isArray(v) ? 'array' : v === null ? 'null' : typeof v);

/** Go's JSON decoding of one field into its typed slot: a wrong type is a 400, as json.Unmarshal fails. */
function typed<T>(o: K8sObject, field: string, ok: (v: unknown) => boolean, goType: string): T | undefined {
  const v = o[field];
  if (v === undefined || v === null) return undefined;
  if (!ok(v))
    throw badRequest(
      `json: cannot unmarshal ${typeName(v)} into Go struct field DeleteOptions.${field} of type ${goType}`,
    );
  return v as T;
}

interface RawDeleteOptions {
  gracePeriodSeconds?: number;
  propagationPolicy?: string;
  orphanDependents?: boolean;
  preconditions?: { uid?: string; resourceVersion?: string };
  dryRun: string[];
}

/** A DeleteOptions body (the DELETE's, or an Eviction's deleteOptions). */
export function deleteOptionsFromBody(o: K8sObject): DeleteOptions {
  // Every apiVersion carries DeleteOptions (apimachinery meta/internalversion registers it unversioned); any other
  // kind decodes to something that is not DeleteOptions.
  if (o.kind !== undefined && o.kind !== null && o.kind !== '' && o.kind !== 'DeleteOptions')
    throw badRequest(`no kind "${o.kind}" is registered for version "${o.apiVersion ?? ''}": not DeleteOptions`);
  const isString = (v: unknown) => typeof v === 'string';
  const pre = typed<K8sObject>(o, 'preconditions', (v) => typeof v === 'object' && !Array.isArray(v), 'Preconditions');
  return validated({
    gracePeriodSeconds: typed<number>(o, 'gracePeriodSeconds', Number.isInteger, 'int64'),
    propagationPolicy: typed<string>(o, 'propagationPolicy', isString, 'v1.DeletionPropagation'),
    orphanDependents: typed<boolean>(o, 'orphanDependents', (v) => typeof v === 'boolean', 'bool'),
    preconditions: pre && {
      uid: typed<string>(pre, 'uid', isString, 'types.UID'),
      resourceVersion: typed<string>(pre, 'resourceVersion', isString, 'string'),
    },
    dryRun: typed<string[]>(o, 'dryRun', (v) => Array.isArray(v) && v.every(isString), '[]string') ?? ([] as string[]),
  });
}

/** strconv.ParseBool's spellings, as the query's bool parameters are converted. */
const GO_BOOLS: Record<string, boolean> = { '1': true, t: true, T: true, TRUE: true, true: true, True: true };
for (const f of ['0', 'f', 'F', 'FALSE', 'false', 'False']) GO_BOOLS[f] = false;

/** The query's DeleteOptions (apimachinery's url.Values conversion: the first value of each; no preconditions). */
export function deleteOptionsFromQuery(q: URLSearchParams): DeleteOptions {
  const grace = q.get('gracePeriodSeconds');
  if (grace !== null && !/^[+-]?\d+$/.test(grace))
    throw badRequest(`strconv.ParseInt: parsing "${grace}": invalid syntax`);
  const orphan = q.get('orphanDependents');
  if (orphan !== null && !(orphan in GO_BOOLS))
    throw badRequest(`strconv.ParseBool: parsing "${orphan}": invalid syntax`);
  return validated({
    gracePeriodSeconds: grace === null ? undefined : Number(grace),
    propagationPolicy: q.get('propagationPolicy') ?? undefined,
    orphanDependents: orphan === null ? undefined : GO_BOOLS[orphan],
    dryRun: q.getAll('dryRun'),
  });
}

/**
 * A DELETE's options as delete.go reads them (DeleteResource and DeleteCollection alike): from the body when it has
 * any bytes — the query is then not read at all, dryRun included — and only otherwise from the query.
 */
export function deleteOptions(q: URLSearchParams, body: K8sObject | undefined): DeleteOptions {
  return body === undefined ? deleteOptionsFromQuery(q) : deleteOptionsFromBody(body);
}

const POLICIES = ['Foreground', 'Background', 'Orphan'];

/** ValidateDeleteOptions: each failure is a 422 Invalid on meta.k8s.io DeleteOptions, before anything is deleted. */
function validated(raw: RawDeleteOptions): DeleteOptions {
  const causes: { field: string; message: string; reason: string }[] = [];
  if (raw.orphanDependents !== undefined && raw.propagationPolicy !== undefined)
    causes.push({
      field: 'propagationPolicy',
      reason: 'FieldValueInvalid',
      message: `Invalid value: "${raw.propagationPolicy}": orphanDependents and deletionPropagation cannot be both set`,
    });
  if (raw.propagationPolicy !== undefined && !POLICIES.includes(raw.propagationPolicy))
    causes.push({
      field: 'propagationPolicy',
      reason: 'FieldValueNotSupported',
      message:
        `Unsupported value: "${raw.propagationPolicy}": ` +
        'supported values: "Foreground", "Background", "Orphan", "nil"',
    });
  causes.push(...dryRunCauses(raw.dryRun));
  if (causes.length > 0) throw invalid('DeleteOptions', 'meta.k8s.io', '', causes);
  const d: DeleteOptions = { dryRun: raw.dryRun.length > 0 };
  if (raw.gracePeriodSeconds !== undefined) d.gracePeriodSeconds = raw.gracePeriodSeconds;
  if (raw.propagationPolicy !== undefined)
    d.propagationPolicy = raw.propagationPolicy as DeleteOptions['propagationPolicy'];
  if (raw.orphanDependents !== undefined) d.orphanDependents = raw.orphanDependents;
  if (raw.preconditions) d.preconditions = raw.preconditions;
  return d;
}

/** ValidateDryRun: "All" or nothing; any other value is refused, never taken as a real write. */
function dryRunCauses(list: string[]): { field: string; message: string; reason: string }[] {
  if (list.every((v) => v === 'All')) return [];
  const values = list.map((v) => JSON.stringify(v)).join(', ');
  return [
    {
      field: 'dryRun',
      reason: 'FieldValueNotSupported',
      message: `Unsupported value: []string{${values}}: supported values: "All"`,
    },
  ];
}

/** The options kind of each write whose options come from the query (upstream's create.go, update.go, patch.go). */
export const WRITE_OPTIONS: Record<string, string> = {
  POST: 'CreateOptions',
  PUT: 'UpdateOptions',
  PATCH: 'PatchOptions',
};

/** The query's dryRun of a create, update or patch (ValidateCreateOptions / UpdateOptions / PatchOptions). */
export function isDryRun(q: URLSearchParams, optionsKind = 'CreateOptions'): boolean {
  const list = q.getAll('dryRun');
  const causes = dryRunCauses(list);
  if (causes.length > 0) throw invalid(optionsKind, 'meta.k8s.io', '', causes);
  return list.length > 0;
}
