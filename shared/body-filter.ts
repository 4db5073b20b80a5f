// The JSON body filter of filtered steals: `<path>: <regex>`, a path into the request's JSON body (`$.user.name`,
// `items[0].kind`) and an RE2 pattern (shared/filter-regex.ts) its value must match. The CLI checks it with the same
// function before any agent is touched; the agent compiles it again when a subscribe arrives.
import { UserError } from './errors.js';
import { compileFilterRegex, type FilterRegex } from './filter-regex.js';

/**
 * The most body the agent buffers to decide a request: a request whose JSON body is longer goes to the pod (a filter
 * cannot read what it has not seen, and holding more would let one request take the agent's memory).
 */
export const MAX_FILTERED_BODY_BYTES = 64 * 1024;

export interface BodyFilter {
  /** Object keys and array indexes from the body's root. */
  path: (string | number)[];
  value: FilterRegex;
}

const SEGMENT = /^(?:\.([A-Za-z0-9_$-]+)|\[(\d+)\]|\["([^"\\]*)"\])/;

function badPath(text: string, what: string): UserError {
  return new UserError(
    `${what} "${text}" is not "json-path: regex"`,
    'write it as e.g. "$.user.name: ^alice$" or "items[0].kind: ^Llama$" (keys with dots, [n] indexes)',
  );
}

/** Compiles `<path>: <regex>`; throws a UserError naming the bad part. */
export function compileBodyFilter(text: string, what: string): BodyFilter {
  const colon = text.indexOf(':');
  if (colon <= 0) throw badPath(text, what);
  let rest = text.slice(0, colon).trim();
  if (rest.startsWith('$')) rest = rest.slice(1);
  else rest = `.${rest}`;
  const path: (string | number)[] = [];
  while (rest.length > 0) {
    const m = SEGMENT.exec(rest);
    if (!m) throw badPath(text, what);
    path.push(m[2] !== undefined ? Number(m[2]) : (m[1] ?? m[3]));
    rest = rest.slice(m[0].length);
  }
  if (path.length === 0) throw badPath(text, what);
  return { path, value: compileFilterRegex(text.slice(colon + 1).trim(), what) };
}

/** A JSON body's value at the filter's path as text (strings as they are, anything else as JSON), or undefined. */
export function bodyValueAt(body: unknown, path: readonly (string | number)[]): string | undefined {
  let at: unknown = body;
  for (const key of path) {
    if (typeof key === 'number' ? !Array.isArray(at) : at === null || typeof at !== 'object' || Array.isArray(at))
      return undefined;
    if (!Object.hasOwn(at as object, key)) return undefined;
    at = (at as Record<string | number, unknown>)[key];
  }
  return typeof at === 'string' ? at : JSON.stringify(at);
}

export function bodyMatches(filter: BodyFilter, body: unknown): boolean {
  const value = bodyValueAt(body, filter.path);
  return value !== undefined && filter.value.test(value);
}

/** `application/json` and the `+json` types (`application/merge-patch+json`, …), with any parameters. */
export function isJsonContentType(contentType: string | undefined): boolean {
  const type = contentType?.split(';')[0].trim().toLowerCase() ?? '';
  return type === 'application/json' || /^application\/[a-z0-9.+-]+\+json$/.test(type);
}
