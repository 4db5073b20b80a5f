// What the bundles' npm packages get for `whatwg-url` (scripts/build-options.mjs): Node's own WHATWG URL classes. Its
// one caller, node-fetch 2 (the kube client's HTTP), takes `url.URL || whatwgUrl.URL`, Node's always; the package
// itself would only be evaluated at every start, its tr46 mapping table (254 KiB) parsed and kept for nothing.
module.exports = { URL: globalThis.URL, URLSearchParams: globalThis.URLSearchParams };
