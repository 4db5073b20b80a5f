// HTTP filters of filtered steals, compiled once per subscription: header / path regex (RE2, matched in linear time:
// shared/filter-regex.ts), method and JSON body (shared/body-filter.ts), all-of or any-of. Loaded with the port's first
// filter (agent/incoming/ports.ts).
import { bodyMatches, compileBodyFilter } from '../../shared/body-filter.js';
import { UserError } from '../../shared/errors.js';
import { compileFilterRegex, compileHeaderFilter, type FilterRegex } from '../../shared/filter-regex.js';
import type { HttpFilter } from '../../shared/protocol.js';
import type { RequestMatcher } from './subscription.js';

export { describeFilter, type RequestHead, type RequestMatcher } from './subscription.js';

/** The CLI checked the pattern already; a subscribe from any client is checked again here (never trust the wire). */
function compile(source: string, what: string): FilterRegex {
  return compileFilterRegex(source, `the ${what} filter`);
}

/**
 * Compiles a filter; throws a UserError naming the bad part. A filter with no criterion is refused (it would steal
 * all).
 */
export function compileFilter(filter: HttpFilter): RequestMatcher {
  const tests: RequestMatcher[] = [];
  if (filter.header !== undefined) {
    const { name, value } = compileHeaderFilter(filter.header, 'the header filter');
    tests.push((req) => {
      const v = req.headers[name];
      if (v === undefined) return false;
      return (Array.isArray(v) ? v : [v]).some((one) => value.test(one));
    });
  }
  if (filter.path !== undefined) {
    const path = compile(filter.path, 'path');
    tests.push((req) => path.test(req.url));
  }
  if (filter.method !== undefined) {
    const method = filter.method.toUpperCase();
    tests.push((req) => req.method.toUpperCase() === method);
  }
  if (filter.body !== undefined) {
    const body = compileBodyFilter(filter.body, 'the body filter');
    tests.push((req) => req.body !== undefined && bodyMatches(body, req.body.json));
  }
  if (tests.length === 0)
    throw new UserError(
      'the HTTP filter has no header, path, method or body',
      'give at least one of header, path, method or body, or steal the whole port',
    );
  const matcher: RequestMatcher =
    (filter.match ?? 'all') === 'any' ? (req) => tests.some((t) => t(req)) : (req) => tests.every((t) => t(req));
  matcher.needsBody = filter.body !== undefined;
  return matcher;
}
