// What the bundles' npm packages get for `util` (scripts/build-options.mjs): Node's module, with _extend() as Node
// defines it — an object source's own enumerable keys copied onto the target — without the DEP0060 warning that
// Node 22 and later print at its first call. The caller: http-proxy (the shadow proxy), for each request's options.
// devop's own code imports node:util, which this does not replace.
const util = require('node:util');

function _extend(target, source) {
  if (source === null || typeof source !== 'object') return target;
  for (const key of Object.keys(source)) target[key] = source[key];
  return target;
}

module.exports = { ...util, _extend };
