// The regular expressions of HTTP filters (header value, path): RE2 syntax, matched by re2js in time linear in the
// text, so that no pattern and no request can hold the agent's one event loop (a backtracking RegExp could: one
// request with 28 `a`s and a `!` against `(a+)+$` stopped every connection of the port for 20 s). The CLI checks a
// pattern with the same function before any agent is touched; the agent checks it again when a subscribe arrives.
import { RE2JS } from 're2js';
import { UserError } from './errors.js';

/** A compiled filter pattern: does it match somewhere in the text (as RegExp.prototype.test, unanchored)? */
export interface FilterRegex {
  test(text: string): boolean;
}

/**
 * The largest compiled pattern a filter may be, in RE2 instructions. Matching is linear in the text but also in the
 * pattern's size: measured on the agent's Node flags (--lite-mode), `(\w|\s){900}[0-9]` (2 703 instructions) took
 * 0.65 s per 16 KiB header; at 500 a request costs at most about a fifth of that. Real filters are far smaller
 * (`^/api/v1/llamas(/.*)?$`: 24; twenty names joined with `|`: ~150).
 */
export const MAX_FILTER_INSTRUCTIONS = 500;

/**
 * The most text a filter is matched against: the agent's HTTP server reads request heads (request line + headers) up
 * to this size and answers 431 beyond it, so no header value or path it matches is longer (Node's default, fixed here
 * so that a --max-http-header-size in NODE_OPTIONS cannot raise it).
 */
export const MAX_REQUEST_HEAD_BYTES = 16 * 1024;

/** Syntax JavaScript accepts and RE2 does not (backreferences and lookaround need backtracking), for a refusal. */
const JS_ONLY_SYNTAX: Array<[RegExp, string]> = [
  [/\\[1-9]|\\k</, 'a backreference'],
  [/\(\?<[=!]/, 'a lookbehind'],
  [/\(\?[=!]/, 'a lookahead'],
  [/\\u[0-9a-fA-F{]/, 'a \\u escape (write \\x{263a} instead)'],
  [/\\c[A-Za-z]/, 'a \\c control escape'],
  [/\{\d*,?\d{4,}\}/, 'a repeat count over 1000'],
];

/**
 * Compiles a filter pattern; `what` names it in a refusal (`--http-path-filter`, `the path filter`). Throws a
 * UserError whose message names the problem and whose hint names the fix.
 */
export function compileFilterRegex(source: string, what: string): FilterRegex {
  let compiled: RE2JS;
  try {
    compiled = RE2JS.compile(source);
  } catch (err) {
    const why = (err as Error).message.replace(/^error parsing regexp: /, '');
    if (validInJavaScript(source)) {
      const name = JS_ONLY_SYNTAX.find(([syntax]) => syntax.test(source))?.[1] ?? 'syntax RE2 does not accept';
      throw new UserError(
        `${what} "${source}" uses ${name}, which filters do not support (${why}): filters are RE2 patterns, ` +
          'matched in linear time',
        `rewrite the pattern given to ${what} without it (RE2 syntax: no backreferences, no lookaround)`,
      );
    }
    throw new UserError(
      `${what} "${source}" is not a valid regular expression (${why})`,
      `fix the pattern given to ${what} (RE2 syntax)`,
    );
  }
  const size = (compiled.re2().prog as { numInst(): number }).numInst();
  if (size > MAX_FILTER_INSTRUCTIONS)
    throw new UserError(
      `${what} "${source}" is too large for a filter (${size} RE2 instructions, at most ${MAX_FILTER_INSTRUCTIONS}): ` +
        'the agent matches it against every request',
      `shorten the pattern given to ${what} (e.g. smaller {n} repeat counts)`,
    );
  return {
    test: (text) => text.length <= MAX_REQUEST_HEAD_BYTES && compiled.test(text),
  };
}

/**
 * A header filter `name: value-regex`: the header's name (lower case; names are case-insensitive) and its value's
 * compiled pattern. `what` names it in a refusal.
 */
export function compileHeaderFilter(text: string, what: string): { name: string; value: FilterRegex } {
  const colon = text.indexOf(':');
  if (colon <= 0)
    throw new UserError(`${what} "${text}" is not of the form "name: value-regex"`, 'write it as e.g. "x-user: alice"');
  return {
    name: text.slice(0, colon).trim().toLowerCase(),
    value: compileFilterRegex(text.slice(colon + 1).trim(), what),
  };
}

/** Why `source` cannot be a filter pattern (the refusal's message and fix, one line), or undefined when it can. */
export function filterRegexProblem(source: string, what: string): string | undefined {
  try {
    compileFilterRegex(source, what);
    return undefined;
  } catch (err) {
    return err instanceof UserError ? `${err.message}; fix: ${err.hint}` : String(err);
  }
}

function validInJavaScript(source: string): boolean {
  try {
    new RegExp(source);
    return true;
  } catch {
    return false;
  }
}
