// What the bundles' npm packages get for `url` (scripts/build-options.mjs): Node's module, with parse() that parses
// exactly as Node's does — the same Url method — without the DEP0169 warning that Node 24 and later print when the
// caller's file is not under node_modules (a bundle's never is). The callers: node-fetch 2 (the kube client's HTTP,
// which hands it URLs already serialized by WHATWG `new URL()`) and http-proxy (the shadow proxy, for a request's
// path). devop's own code imports node:url, which this does not replace.
const url = require('node:url');

function parse(input, parseQueryString, slashesDenoteHost) {
  if (input instanceof url.Url) return input;
  const parsed = new url.Url();
  parsed.parse(input, parseQueryString, slashesDenoteHost);
  return parsed;
}

module.exports = { ...url, parse };
