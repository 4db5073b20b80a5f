// Field-manager benchmark (no cluster): what server-side apply and the Update manager cost the stand-in per write, on a
// Deployment of 5 containers with 20 env entries each (the merge by schema, the field sets, the compare and the prune).
// Last line: RESULT field-managers apply_ms=<t> update_ms=<t2> (means over ROUNDS writes)
import { applyConfig, recordUpdate } from '../standin/apiserver/field-managers.js';
import type { K8sObject } from '../standin/apiserver/errors.js';

const ROUNDS = 500;

function deployment(): K8sObject {
  const containers = Array.from({ length: 5 }, (_, i) => ({
    name: `c${i}`,
    image: `img:${i}`,
    env: Array.from({ length: 20 }, (_, j) => ({ name: `E${j}`, value: `${j}` })),
    ports: [{ containerPort: 8000 + i }],
  }));
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'bench', namespace: 'default', labels: { app: 'bench' } },
    spec: {
      replicas: 1,
      selector: { matchLabels: { app: 'bench' } },
      template: { metadata: { labels: { app: 'bench' } }, spec: { containers } },
    },
  };
}

let live = applyConfig(undefined, deployment(), 'bench', false);
// Warm-up: the schemas load on first use.
for (let i = 0; i < 20; i++) live = applyConfig(live, deployment(), 'bench', false);

let started = performance.now();
for (let i = 0; i < ROUNDS; i++) live = applyConfig(live, deployment(), 'bench', false);
const applyMs = (performance.now() - started) / ROUNDS;

started = performance.now();
for (let i = 0; i < ROUNDS; i++) {
  const next = structuredClone(live);
  next.spec.replicas = i + 2;
  live = recordUpdate(live, next, 'scaler');
}
const updateMs = (performance.now() - started) / ROUNDS;

console.log(`RESULT field-managers apply_ms=${applyMs.toFixed(2)} update_ms=${updateMs.toFixed(2)}`);
