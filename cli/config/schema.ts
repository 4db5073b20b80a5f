// The devop.json schema (zod), generated from the options table: loading and validation with errors that name the key
// path, the bad value and what is accepted. devop.schema.json is generated from it. Loaded only when a command runs.
import { readFileSync } from 'node:fs';
// A namespace import: the bundler keeps only the parts of zod used here. `import { z }` makes the namespace a value,
// which brings all of zod and its 60 locales (0.4 MB more for every command to compile at start).
import * as z from 'zod';
import { UserError } from '../../shared/errors.js';
import { compileBodyFilter } from '../../shared/body-filter.js';
import { isTlsSecretSpec } from './tls-secret-spec.js';
import { filterRegexProblem } from '../../shared/filter-regex.js';
import { TARGET_FORMS, parseTarget } from '../../shared/target.js';
import { DURATION } from './duration.js';
import { CONFIG_DOC, configSection, OPTIONS, type OptionSpec } from './options.js';
import type { DevopConfig as Config, DevopConfigInput } from './types.js';

export { CONFIG_FILE_NAME } from './file-name.js';
export type DevopConfig = Config;
export type { DevopConfigInput } from './types.js';

const PORT_MAPPING = /^(\d{1,5})(?::(\d{1,5}))?$/;
const PORT_MAPPING_EXPECTED = 'expected a port mapping REMOTE[:LOCAL] with ports 1-65535, e.g. 3000 or "80:8080"';

/** `REMOTE[:LOCAL]` (or a bare port number) → the pod port and the local port it maps to; null when malformed. */
export function parsePortMapping(spec: string | number): { remote: number; local: number } | null {
  const m = PORT_MAPPING.exec(String(spec).trim());
  if (!m) return null;
  const remote = Number(m[1]);
  const local = m[2] === undefined ? remote : Number(m[2]);
  const ok = (p: number): boolean => Number.isInteger(p) && p >= 1 && p <= 65535;
  return ok(remote) && ok(local) ? { remote, local } : null;
}

/** A filter pattern the agent accepts: RE2 syntax, small enough (shared/filter-regex.ts). */
function isRegex(source: string): boolean {
  return filterRegexProblem(source, 'the pattern') === undefined;
}

function isBodyFilter(v: string): boolean {
  try {
    compileBodyFilter(v, 'the body filter');
    return true;
  } catch {
    return false;
  }
}

function isHeaderFilter(v: string): boolean {
  return /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+:\s*/.test(v) && isRegex(v.slice(v.indexOf(':') + 1).trim());
}

const PORT_MAPPING_DOC = 'A pod port, optionally mapped to another local port: 3000 or "80:8080" (REMOTE:LOCAL).';
const PortMapping = z
  .union([z.number(), z.string()], { error: PORT_MAPPING_EXPECTED })
  .refine((v) => parsePortMapping(v) !== null, { message: PORT_MAPPING_EXPECTED })
  .describe(PORT_MAPPING_DOC);

const Regex = (what: string) =>
  z.string().refine(isRegex, {
    message: `expected a valid regular expression for ${what} (RE2: no backreferences or lookaround)`,
  });

const Toleration = z
  .strictObject({
    key: z.string().optional(),
    operator: z.enum(['Exists', 'Equal']).optional(),
    value: z.string().optional(),
    effect: z.enum(['NoSchedule', 'PreferNoSchedule', 'NoExecute']).optional(),
    tolerationSeconds: z.number().int().optional(),
  })
  .describe('A Kubernetes toleration for the agent pod.');

/** The check of each table type (options.ts), before its default and doc sentence. */
function valueSchema(spec: OptionSpec): z.ZodType {
  switch (spec.type) {
    case 'string':
      return z.string();
    case 'boolean':
      return z.boolean();
    case 'integer':
    case 'number': {
      let n = spec.type === 'integer' ? z.number().int() : z.number();
      if (spec.min !== undefined) n = n.min(spec.min);
      return spec.max !== undefined ? n.max(spec.max) : n;
    }
    case 'enum':
      return z.enum(spec.values as [string, ...string[]]);
    case 'strings':
      return z.array(z.string());
    case 'paths':
      return z.array(z.string().min(1));
    case 'map':
      return z.record(z.string(), z.string());
    case 'target':
      return z.string().refine((v) => safeTarget(v), { message: `expected a target: ${TARGET_FORMS}` });
    case 'kubeDuration':
      return z.string().regex(DURATION, 'expected seconds or a duration such as "10s", "1m", "1m30s", or "0"');
    case 'portMappings':
      return z.array(PortMapping);
    case 'headerFilter':
      return z.string().refine(isHeaderFilter, {
        message:
          'expected "Header-Name: value-regex", the regex RE2 (no backreferences or lookaround), e.g. ' +
          '"x-devop-user: alice"',
      });
    case 'bodyFilter':
      return z.string().refine(isBodyFilter, {
        message:
          'expected "json-path: value-regex", the regex RE2 (no backreferences or lookaround), e.g. ' +
          '"$.user.name: ^alice$"',
      });
    case 'tlsSecrets':
      return z.array(
        z.string().refine(isTlsSecretSpec, {
          message: 'expected "[PORT=]NAME" of a kubernetes.io/tls Secret, e.g. "api-tls" or "8443=api-tls"',
        }),
      );
    case 'regex':
      return Regex('the path');
    case 'httpMethod':
      return z.string().regex(/^[A-Za-z]+$/, 'expected an HTTP method such as GET');
    case 'tolerations':
      return z.array(Toleration);
  }
}

function keySchema(spec: OptionSpec): z.ZodType {
  const value = valueSchema(spec);
  const withDefault = spec.default !== undefined ? value.default(spec.default as never) : value.optional();
  return withDefault.describe(spec.doc ?? '');
}

/** The keys under `prefix` (in table order) as one strict object; a section comes where its first key does. */
function objectSchema(prefix: string): z.ZodObject {
  const shape: Record<string, z.ZodType> = {};
  for (const spec of Object.values(OPTIONS) as OptionSpec[]) {
    if (spec.key === undefined || !spec.key.startsWith(prefix)) continue;
    const [name, ...rest] = spec.key.slice(prefix.length).split('.');
    if (name in shape) continue;
    if (rest.length === 0) {
      shape[name] = keySchema(spec);
      continue;
    }
    const section = configSection(`${prefix}${name}`);
    if (section === undefined) throw new Error(`options.ts: no CONFIG_SECTIONS entry for ${prefix}${name}`);
    const object = objectSchema(`${prefix}${name}.`);
    shape[name] = (section.optional ? object.optional() : object.prefault({})).describe(section.doc);
  }
  return z.strictObject(shape);
}

/** The devop.json schema, generated from the options table; its type is the table's (types.ts). */
export const DevopConfig = objectSchema('').describe(CONFIG_DOC) as unknown as z.ZodType<Config, DevopConfigInput>;

/**
 * The JSON Schema of devop.json (what scripts/gen-schema.ts writes to devop.schema.json): input shapes (defaults make
 * keys optional), with the port-mapping syntax spelled out for editors (zod checks it in a refinement, which JSON
 * Schema cannot carry).
 */
export function configJsonSchema(): Record<string, unknown> {
  const schema = z.toJSONSchema(DevopConfig, {
    io: 'input',
    target: 'draft-2020-12',
    override: (ctx) => {
      if (ctx.zodSchema !== PortMapping) return;
      for (const key of Object.keys(ctx.jsonSchema)) delete (ctx.jsonSchema as Record<string, unknown>)[key];
      Object.assign(ctx.jsonSchema, {
        description: PORT_MAPPING_DOC,
        anyOf: [
          { type: 'integer', minimum: 1, maximum: 65535 },
          { type: 'string', pattern: PORT_MAPPING.source },
        ],
      });
    },
  }) as Record<string, unknown>;
  return { ...schema, title: 'devop.json' };
}

function safeTarget(v: string): boolean {
  try {
    parseTarget(v);
    return true;
  } catch {
    return false;
  }
}

/**
 * Validates a parsed config object; `source` (a file path or "--flags") prefixes errors. Returns it with defaults
 * filled.
 */
export function parseConfig(obj: unknown, source: string): Config {
  const parsed = DevopConfig.safeParse(obj);
  if (parsed.success) return parsed.data;
  throw configError(parsed.error.issues, obj, source);
}

/** A devop.json's text; a missing or unreadable file is one line, `missingHint` the fix for a missing one. */
export function readConfigText(path: string, missingHint: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT')
      throw new UserError(`config file ${path} does not exist`, missingHint);
    throw new UserError(
      `cannot read config file ${path}: ${(err as Error).message}`,
      'check the path and its permissions',
    );
  }
}

/** Reads and validates a devop.json file. */
export function loadConfigFile(path: string): Config {
  const text = readConfigText(path, 'check the path given to -f/--config');
  let obj: unknown;
  try {
    obj = JSON.parse(text);
  } catch (err) {
    throw new UserError(
      `config file ${path} is not valid JSON: ${(err as Error).message}`,
      'fix the JSON syntax (editors validate it against devop.schema.json)',
    );
  }
  return parseConfig(obj, path);
}

/** Merges config layers, later ones winning; objects merge key by key, lists and scalars are replaced. */
export function mergeConfigInput(...layers: unknown[]): unknown {
  const isPlain = (v: unknown): v is Record<string, unknown> =>
    typeof v === 'object' && v !== null && !Array.isArray(v);
  let result: unknown = {};
  for (const layer of layers) {
    if (layer === undefined) continue;
    if (!isPlain(result) || !isPlain(layer)) {
      result = layer;
      continue;
    }
    const merged: Record<string, unknown> = { ...result };
    for (const [k, v] of Object.entries(layer)) {
      if (v === undefined) continue;
      merged[k] = isPlain(merged[k]) && isPlain(v) ? mergeConfigInput(merged[k], v) : v;
    }
    result = merged;
  }
  return result;
}

type Issue = z.core.$ZodIssue;

/**
 * One problem of a config: the key path as written in JavaScript (`incoming.ports[1]`), what it is, what is accepted.
 */
export interface ConfigProblem {
  key: string;
  /** "is 70000", "is missing", or "is not a devop.json key". */
  found: string;
  accepted: string;
}

/** Every problem of a config object (empty when it is valid). */
export function configProblems(obj: unknown): ConfigProblem[] {
  const parsed = DevopConfig.safeParse(obj);
  return parsed.success ? [] : parsed.error.issues.flatMap((issue) => describeIssue(issue, obj));
}

/** `<source>: <key> <found> — accepted: <what>`: one line per problem, as `devop config validate` prints them. */
export function formatConfigProblem(problem: ConfigProblem, source: string): string {
  return `${source}: ${problem.key} ${problem.found} — accepted: ${problem.accepted}`;
}

function configError(issues: readonly Issue[], obj: unknown, source: string): UserError {
  const problems = issues.flatMap((issue) => describeIssue(issue, obj));
  const first = problems[0];
  const more = problems.length > 1 ? ` (and ${problems.length - 1} more problem${problems.length > 2 ? 's' : ''})` : '';
  const unknown = issues[0].code === 'unrecognized_keys' ? issues[0] : undefined;
  if (unknown) {
    const where = keyPath(unknown.path);
    const keys = unknown.keys.map((key) => keyPath([...unknown.path, key])).join(', ');
    return new UserError(
      `${source}: unknown key ${keys}${more}`,
      `accepted keys${where ? ` in ${where}` : ''}: ${acceptedKeys(unknown.path.map(String)).join(', ')}`,
    );
  }
  return new UserError(`${source}: ${first.key} ${first.found}${more}`, `accepted: ${first.accepted}`);
}

function keyPath(path: ReadonlyArray<PropertyKey>): string {
  return path
    .map((segment, i) =>
      typeof segment === 'number' ? `[${segment}]` : i === 0 ? String(segment) : `.${String(segment)}`,
    )
    .join('');
}

function describeIssue(issue: Issue, root: unknown): ConfigProblem[] {
  const path = issue.path.map(String);
  if (issue.code === 'unrecognized_keys') {
    const where = keyPath(issue.path);
    const keys = acceptedKeys(path).join(', ');
    return issue.keys.map((key) => ({
      key: keyPath([...issue.path, key]),
      found: 'is not a devop.json key',
      accepted: where ? `in ${where}: ${keys}` : keys,
    }));
  }
  const value = valueAt(root, path);
  const shown = value === undefined ? 'missing' : truncate(JSON.stringify(value));
  return [{ key: path.length ? keyPath(issue.path) : '(top level)', found: `is ${shown}`, accepted: accepted(issue) }];
}

function accepted(issue: Issue): string {
  switch (issue.code) {
    case 'invalid_type':
      return issue.expected === 'array'
        ? 'a list (JSON array)'
        : issue.expected === 'object'
          ? 'an object'
          : `a ${issue.expected}`;
    case 'invalid_value':
      return issue.values.map((v) => JSON.stringify(v)).join(' | ');
    case 'too_small':
      return issue.origin === 'string'
        ? `a string of at least ${String(issue.minimum)} characters`
        : `a number >= ${String(issue.minimum)}`;
    case 'too_big':
      return issue.origin === 'string'
        ? `a string of at most ${String(issue.maximum)} characters`
        : `a number <= ${String(issue.maximum)}`;
    default:
      return issue.message.replace(/^(Invalid input: )?expected /, '');
  }
}

function acceptedKeys(path: string[]): string[] {
  let schema: z.ZodType = DevopConfig;
  for (const segment of path) {
    const inner = unwrap(schema);
    if (!(inner instanceof z.ZodObject)) return [];
    schema = inner.shape[segment] as z.ZodType;
  }
  const inner = unwrap(schema);
  return inner instanceof z.ZodObject ? Object.keys(inner.shape) : [];
}

function unwrap(schema: z.ZodType): z.ZodType {
  let current: z.ZodType = schema;
  // optional(default(prefault(object))) at most: a few layers, never a cycle.
  for (let i = 0; i < 5; i += 1) {
    if (current instanceof z.ZodOptional || current instanceof z.ZodDefault || current instanceof z.ZodPrefault)
      current = current.unwrap() as z.ZodType;
    else break;
  }
  return current;
}

function valueAt(root: unknown, path: string[]): unknown {
  let value: unknown = root;
  for (const segment of path) {
    if (value === null || typeof value !== 'object') return undefined;
    value = (value as Record<string, unknown>)[segment];
  }
  return value;
}

function truncate(text: string | undefined): string {
  if (text === undefined) return 'undefined';
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}
