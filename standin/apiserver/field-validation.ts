// Unknown fields in a write's body, handled as kube-apiserver's strict decoding does: fieldValidation=Strict answers
// 400, Warn (the default) a Warning header per field, Ignore nothing (apiserver pkg/endpoints/handlers/rest.go
// fieldValidation and addStrictDecodingWarnings, create.go, update.go transformDecodeError; apimachinery
// pkg/runtime/error.go strictDecodingError). Fields are checked against the kind's published schema (openapi.ts).
import type { ServerResponse } from 'node:http';
import { badRequest, type K8sObject } from './errors.js';
import type { OpenApiSchemas } from './openapi.js';
import type { ResourceType } from './resources.js';

type Schema = K8sObject;

/** The schema a node stands for: its $ref (alone or as allOf's one entry) followed. */
function resolve(schemas: OpenApiSchemas, s: Schema | undefined): Schema | undefined {
  let cur = s;
  for (let hops = 0; cur && hops < 8; hops++) {
    const ref = typeof cur.$ref === 'string' ? cur.$ref : cur.allOf?.length === 1 ? cur.allOf[0].$ref : undefined;
    if (typeof ref !== 'string') return cur;
    cur = schemas.definitions[ref.replace(/^#\/(definitions|components\/schemas)\//, '')];
  }
  return cur;
}

/** How a body is read: a strategic merge patch also carries `$patch`, `$setElementOrder/…` and other directives. */
interface Walk {
  schemas: OpenApiSchemas;
  directives: boolean;
  out: string[];
}

function walk(w: Walk, s: Schema | undefined, value: unknown, path: string): void {
  const { schemas, out } = w;
  const schema = resolve(schemas, s);
  if (!schema || schema['x-kubernetes-preserve-unknown-fields'] === true) return;
  if (Array.isArray(value)) {
    if (schema.items) for (const [i, v] of value.entries()) walk(w, schema.items, v, `${path}[${i}]`);
    return;
  }
  if (!value || typeof value !== 'object') return;
  const extra = typeof schema.additionalProperties === 'object' ? schema.additionalProperties : undefined;
  // A schema with neither properties nor additionalProperties is free-form (RawExtension, int-or-string, …).
  if (!schema.properties && !extra) return;
  for (const [key, v] of Object.entries(value)) {
    const field = path ? `${path}.${key}` : key;
    const known = schema.properties?.[key];
    if (known) walk(w, known, v, field);
    else if (extra) walk(w, extra, v, field);
    else if (w.directives && key.startsWith('$')) continue;
    else if (schema.additionalProperties !== true) out.push(field);
  }
}

/** The paths of the fields the kind's schema does not declare, as the strict decoder names them. */
export function unknownFields(schemas: OpenApiSchemas, t: ResourceType, body: K8sObject, directives = false): string[] {
  const schema = schemas.schemaOf(t);
  if (!schema) return [];
  const out: string[] = [];
  walk({ schemas, directives, out }, schema, body, '');
  return out;
}

/**
 * Applies the request's fieldValidation to a create, update or patch body: Strict throws kube-apiserver's 400, Warn
 * (also when the parameter is absent) sets one Warning header per unknown field, Ignore does nothing.
 */
export function checkFields(
  schemas: OpenApiSchemas,
  t: ResourceType,
  body: K8sObject,
  query: URLSearchParams,
  res: ServerResponse,
  directives = false,
): void {
  const directive = query.get('fieldValidation') || 'Warn';
  if (directive === 'Ignore') return;
  const unknown = unknownFields(schemas, t, body, directives);
  if (unknown.length === 0) return;
  const errors = unknown.map((f) => `unknown field "${f}"`);
  if (directive === 'Strict') {
    throw badRequest(
      `${t.kind} in version "${t.version}" cannot be handled as a ${t.kind}: ` +
        `strict decoding error: ${errors.join(', ')}`,
    );
  }
  // k8s.io/apiserver pkg/warning: `299 - "<text>"`, the text quoted as Go's strconv.Quote does.
  res.setHeader(
    'Warning',
    errors.map((e) => `299 - ${JSON.stringify(e)}`),
  );
}
