// Trims kube-apiserver's OpenAPI v2 document to the schemas of the kinds the stand-in serves, for its /openapi/v2 and
// /openapi/v3 (standin/apiserver/openapi.ts). Reproducible: the same input gives the same file.
//
//   node scripts/openapi-definitions.mjs <swagger.json> "<where it came from>"
//
// The committed file was made from kubernetes api/openapi-spec/swagger.json at v1.32.0 (the version the stand-in
// reports), as kubernetes-client/javascript keeps it: src/gen/swagger.json.unprocessed at
// f89c179b2db0a9f2c78ab6e40dd9f0a12ea946a3 ("Automated openapi generation from 1.32", settings: KUBERNETES_BRANCH
// v1.32.0).
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The group-versions whose kinds the stand-in serves (standin/apiserver/resources.ts) or takes as bodies. */
const SERVED_GROUP_VERSIONS = new Set([
  '/v1',
  'apps/v1',
  'batch/v1',
  'autoscaling/v1',
  'autoscaling/v2',
  'coordination.k8s.io/v1',
  'events.k8s.io/v1',
  'apiextensions.k8s.io/v1',
  'apiregistration.k8s.io/v1',
  'admissionregistration.k8s.io/v1',
  'authorization.k8s.io/v1',
  'authentication.k8s.io/v1',
  'rbac.authorization.k8s.io/v1',
  'policy/v1',
]);

const OUT = join(dirname(fileURLToPath(import.meta.url)), '..', 'standin', 'apiserver', 'openapi-definitions.json');

function refsOf(value, out) {
  if (Array.isArray(value)) for (const v of value) refsOf(v, out);
  else if (value && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      if (k === '$ref' && typeof v === 'string') out.add(v.replace('#/definitions/', ''));
      else refsOf(v, out);
    }
  }
  return out;
}

const [input, source] = process.argv.slice(2);
if (!input || !source) {
  console.error('usage: node scripts/openapi-definitions.mjs <swagger.json> "<where it came from>"');
  process.exit(2);
}
const swagger = JSON.parse(readFileSync(input, 'utf8'));
const all = swagger.definitions;
const roots = Object.keys(all).filter((name) =>
  (all[name]['x-kubernetes-group-version-kind'] ?? []).some(
    (gvk) => SERVED_GROUP_VERSIONS.has(`${gvk.group}/${gvk.version}`) && !name.startsWith('io.k8s.apimachinery'),
  ),
);
const kept = new Set();
const todo = [...roots];
while (todo.length > 0) {
  const name = todo.pop();
  if (kept.has(name) || !all[name]) continue;
  kept.add(name);
  todo.push(...refsOf(all[name], new Set()));
}
// One definition a line, sorted, so an update reads as a diff of the schemas that changed.
const lines = [...kept].sort().map((name) => `${JSON.stringify(name)}:${JSON.stringify(all[name])}`);
const header = { source };
writeFileSync(OUT, `{"x-devop-source":${JSON.stringify(header)},"definitions":{\n${lines.join(',\n')}\n}}\n`);
console.log(`${OUT}: ${kept.size} definitions`);
