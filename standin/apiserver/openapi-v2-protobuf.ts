// Encodes an OpenAPI v2 document as gnostic's openapi_v2.Document protobuf, the form kubectl reads /openapi/v2 in
// (client-go discovery/discovery_client.go OpenAPISchema unmarshals it with proto.Unmarshal). Field numbers are those
// of google/gnostic-models openapiv2/OpenAPIv2.proto; vendor extensions travel as YAML text (kube-openapi
// pkg/util/proto/document.go VendorExtensionToMap parses them back), and JSON is YAML.
type Json = Record<string, unknown>;

/** A protobuf message under construction: fields appended in order, each a tag and its bytes. */
class Message {
  private readonly parts: Buffer[] = [];

  private varint(n: number): void {
    const bytes: number[] = [];
    let v = n;
    while (v >= 0x80) {
      bytes.push((v % 0x80) | 0x80);
      v = Math.floor(v / 0x80);
    }
    bytes.push(v);
    this.parts.push(Buffer.from(bytes));
  }

  bytes(field: number, value: Buffer): this {
    this.varint(field * 8 + 2);
    this.varint(value.length);
    this.parts.push(value);
    return this;
  }

  string(field: number, value: unknown): this {
    if (typeof value === 'string' && value !== '') this.bytes(field, Buffer.from(value, 'utf8'));
    return this;
  }

  strings(field: number, values: unknown): this {
    if (Array.isArray(values)) for (const v of values) this.bytes(field, Buffer.from(String(v), 'utf8'));
    return this;
  }

  bool(field: number, value: unknown): this {
    if (value === true) {
      this.varint(field * 8);
      this.varint(1);
    }
    return this;
  }

  int(field: number, value: unknown): this {
    if (typeof value === 'number' && Number.isInteger(value) && value > 0) {
      this.varint(field * 8);
      this.varint(value);
    }
    return this;
  }

  double(field: number, value: unknown): this {
    if (typeof value !== 'number') return this;
    const b = Buffer.alloc(8);
    b.writeDoubleLE(value);
    this.varint(field * 8 + 1);
    this.parts.push(b);
    return this;
  }

  message(field: number, value: Message | undefined): this {
    return value ? this.bytes(field, value.done()) : this;
  }

  done(): Buffer {
    return Buffer.concat(this.parts);
  }
}

/** gnostic Any: the value as YAML text (field 2). */
function any(value: unknown): Message {
  return new Message().string(2, JSON.stringify(value));
}

/** `x-…` keys as repeated NamedAny. */
function vendorExtensions(m: Message, field: number, o: Json): void {
  for (const [k, v] of Object.entries(o)) {
    if (k.startsWith('x-')) m.message(field, new Message().string(1, k).message(2, any(v)));
  }
}

function schema(s: Json): Message {
  const m = new Message().string(1, s.$ref).string(2, s.format).string(3, s.title).string(4, s.description);
  if (s.default !== undefined) m.message(5, any(s.default));
  m.double(6, s.multipleOf)
    .double(7, s.maximum)
    .bool(8, s.exclusiveMaximum)
    .double(9, s.minimum)
    .bool(10, s.exclusiveMinimum)
    .int(11, s.maxLength)
    .int(12, s.minLength)
    .string(13, s.pattern)
    .int(14, s.maxItems)
    .int(15, s.minItems)
    .bool(16, s.uniqueItems)
    .int(17, s.maxProperties)
    .int(18, s.minProperties)
    .strings(19, s.required);
  if (Array.isArray(s.enum)) for (const e of s.enum) m.message(20, any(e));
  if (typeof s.additionalProperties === 'boolean') {
    m.message(21, new Message().bool(2, s.additionalProperties));
  } else if (s.additionalProperties && typeof s.additionalProperties === 'object') {
    m.message(21, new Message().message(1, schema(s.additionalProperties as Json)));
  }
  if (s.type !== undefined) m.message(22, new Message().strings(1, Array.isArray(s.type) ? s.type : [s.type]));
  if (s.items && typeof s.items === 'object') {
    const items = Array.isArray(s.items) ? s.items : [s.items];
    const list = new Message();
    for (const i of items) list.message(1, schema(i as Json));
    m.message(23, list);
  }
  if (Array.isArray(s.allOf)) for (const a of s.allOf) m.message(24, schema(a as Json));
  if (s.properties && typeof s.properties === 'object') m.message(25, named(s.properties as Json, schema));
  vendorExtensions(m, 31, s);
  return m;
}

/** A map as repeated Named<T> entries (name = 1, value = 2) in field 1 of a wrapper message. */
function named(map: Json, encode: (v: Json) => Message): Message {
  const out = new Message();
  for (const [k, v] of Object.entries(map)) out.message(1, new Message().string(1, k).message(2, encode(v as Json)));
  return out;
}

function parameter(p: Json): Message {
  if (p.in === 'body') {
    const body = new Message()
      .string(1, p.description)
      .string(2, p.name)
      .string(3, p.in)
      .bool(4, p.required)
      .message(5, schema((p.schema ?? {}) as Json));
    return new Message().message(1, new Message().message(1, body));
  }
  // Only query parameters are published here (NonBodyParameter.query_parameter_sub_schema = 3).
  const query = new Message()
    .bool(1, p.required)
    .string(2, p.in)
    .string(3, p.description)
    .string(4, p.name)
    .string(6, p.type)
    .bool(20, p.uniqueItems);
  return new Message().message(1, new Message().message(2, new Message().message(3, query)));
}

function operation(op: Json): Message {
  const m = new Message()
    .strings(1, op.tags)
    .string(3, op.description)
    .string(5, op.operationId)
    .strings(6, op.produces)
    .strings(7, op.consumes);
  for (const p of (op.parameters ?? []) as Json[]) m.message(8, parameter(p));
  const responses = new Message();
  for (const [code, r] of Object.entries((op.responses ?? {}) as Record<string, Json>)) {
    const response = new Message().string(1, r.description);
    if (r.schema) response.message(2, new Message().message(1, schema(r.schema as Json)));
    responses.message(1, new Message().string(1, code).message(2, new Message().message(1, response)));
  }
  m.message(9, responses);
  vendorExtensions(m, 13, op);
  return m;
}

const PATH_ITEM_FIELDS: Record<string, number> = { get: 2, put: 3, post: 4, delete: 5, options: 6, head: 7, patch: 8 };

function pathItem(item: Json): Message {
  const m = new Message();
  for (const [method, field] of Object.entries(PATH_ITEM_FIELDS)) {
    if (item[method]) m.message(field, operation(item[method] as Json));
  }
  return m;
}

/** The whole document: swagger = 1, info = 2, paths = 8 (NamedPathItem in field 2), definitions = 9. */
export function encodeOpenApiV2(doc: Json): Buffer {
  const info = (doc.info ?? {}) as Json;
  const paths = new Message();
  for (const [p, item] of Object.entries((doc.paths ?? {}) as Json)) {
    paths.message(2, new Message().string(1, p).message(2, pathItem(item as Json)));
  }
  return new Message()
    .string(1, doc.swagger)
    .message(2, new Message().string(1, info.title).string(2, info.version))
    .message(8, paths)
    .message(9, named((doc.definitions ?? {}) as Json, schema))
    .done();
}
