// `devop config`: validates a devop.json (every problem on its own line: key path, value, what is accepted) and gives
// the JSON Schema editors read. Takes plain options, returns results; the command prints them.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { DevopConfig } from '../../shared/config.js';
import { UserError } from '../../shared/errors.js';

export const SCHEMA_FILE_NAME = 'devop.schema.json';

export interface ConfigValidation {
  file: string;
  /** One line per problem: `<file>: <key.path> is <value> — accepted: <what>`; empty when the file is valid. */
  problems: string[];
}

type Issue = z.core.$ZodIssue;

/** Reads and checks a devop.json; a missing or unreadable file is a UserError (not a validation problem). */
export function validateConfigFile(path: string): ConfigValidation {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw new UserError(`config file ${path} does not exist`, 'pass the file with -f/--config, or run devop in the folder that holds devop.json');
    throw new UserError(`cannot read config file ${path}: ${(err as Error).message}`, 'check the path and its permissions');
  }
  return validateConfigText(text, path);
}

export function validateConfigText(text: string, file: string): ConfigValidation {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return { file, problems: [`${file}: not valid JSON (${jsonErrorWhere(text, err as Error)}) — accepted: strict JSON (no comments, no trailing commas)`] };
  }
  const parsed = DevopConfig.safeParse(value);
  return { file, problems: parsed.success ? [] : parsed.error.issues.flatMap((issue) => describeIssue(issue, value, file)) };
}

/** `incoming.ports[1]`: the key path as a user would write it in JavaScript. */
function keyPath(path: ReadonlyArray<PropertyKey>): string {
  return path.map((segment, i) => (typeof segment === 'number' ? `[${segment}]` : i === 0 ? String(segment) : `.${String(segment)}`)).join('');
}

function describeIssue(issue: Issue, root: unknown, file: string): string[] {
  const path = issue.path.map(String);
  if (issue.code === 'unrecognized_keys') {
    const accepted = acceptedKeys(path).join(', ');
    const where = keyPath(issue.path);
    return issue.keys.map((key) => `${file}: ${keyPath([...issue.path, key])} is not a devop.json key — accepted${where ? ` in ${where}` : ''}: ${accepted}`);
  }
  const key = path.length ? keyPath(issue.path) : '(top level)';
  const value = valueAt(root, path);
  const shown = value === undefined ? 'missing' : truncate(JSON.stringify(value));
  return [`${file}: ${key} is ${shown} — accepted: ${accepted(issue)}`];
}

function accepted(issue: Issue): string {
  switch (issue.code) {
    case 'invalid_type':
      return issue.expected === 'array' ? 'a list (JSON array)' : issue.expected === 'object' ? 'an object' : `a ${issue.expected}`;
    case 'invalid_value':
      return issue.values.map((v) => JSON.stringify(v)).join(' | ');
    case 'too_small':
      return issue.origin === 'string' ? `a string of at least ${String(issue.minimum)} characters` : `a number >= ${String(issue.minimum)}`;
    case 'too_big':
      return issue.origin === 'string' ? `a string of at most ${String(issue.maximum)} characters` : `a number <= ${String(issue.maximum)}`;
    case 'invalid_union':
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
    if (current instanceof z.ZodOptional || current instanceof z.ZodDefault || current instanceof z.ZodPrefault) current = current.unwrap() as z.ZodType;
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

/** "line 3, column 14: Unexpected token …" from JSON.parse's "at position N". */
function jsonErrorWhere(text: string, err: Error): string {
  const match = /position (\d+)/.exec(err.message);
  const reason = err.message.replace(/ in JSON at position \d+.*$/, '').replace(/^JSON\.parse: /, '');
  if (!match) return reason;
  const before = text.slice(0, Number(match[1]));
  const line = before.split('\n').length;
  const column = before.length - before.lastIndexOf('\n');
  return `line ${line}, column ${column}: ${reason}`;
}

/** The devop package folder (where package.json and devop.schema.json are), from this module's location. */
export function devopPackageRoot(from: string = fileURLToPath(import.meta.url)): string {
  let dir = dirname(from);
  for (let i = 0; i < 6; i += 1) {
    if (existsSync(join(dir, 'package.json')) && existsSync(join(dir, 'bin', 'devop.js'))) return dir;
    dir = dirname(dir);
  }
  throw new UserError('cannot find the devop package folder (package.json beside bin/devop.js)', 'reinstall devop');
}

/** The committed devop.schema.json of the running devop (the one editors should read). */
export function schemaFilePath(root: string = devopPackageRoot()): string {
  const candidates = [join(root, SCHEMA_FILE_NAME), join(root, 'shared', SCHEMA_FILE_NAME)];
  const found = candidates.find((candidate) => existsSync(candidate));
  if (!found) throw new UserError(`${SCHEMA_FILE_NAME} is missing from ${root}`, 'reinstall devop (the schema is part of the package)');
  return resolve(found);
}

/** The JSON Schema of devop.json, as committed (so what `devop config schema` prints is what editors read). */
export function configSchemaText(): string {
  const text = readFileSync(schemaFilePath(), 'utf8');
  return text.endsWith('\n') ? text : `${text}\n`;
}
