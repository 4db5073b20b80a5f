// PodDisruptionBudget status, as the disruption controller keeps it (kubernetes pkg/controller/disruption/
// disruption.go): expected pods (the owning ReplicaSets' replicas, else the matching pods), healthy ones (Ready, not
// being deleted, not just evicted), the healthy pods the budget needs, and how many disruptions that allows — what
// the eviction subresource reads before it deletes a pod.
import { ApiError, type K8sObject } from '../errors.js';
import type { Objects } from '../objects.js';
import { labelSelectorMatcher } from '../selectors.js';
import { isPodReady, type Controller } from './loop.js';

const PDBS = 'policy/poddisruptionbudgets';

/** An IntOrString budget scaled to `total` (GetScaledValueFromIntOrPercent, rounding up). */
function scaled(v: number | string, total: number): number {
  if (typeof v === 'number') return v;
  const pct = Number(String(v).replace(/%$/, ''));
  return Math.ceil((pct * total) / 100);
}

/** The selector of a budget, or undefined when it is empty (an empty selector selects no pod). */
export function budgetSelector(pdb: K8sObject): ((o: K8sObject) => boolean) | undefined {
  const sel = pdb.spec?.selector;
  if (!sel || (Object.keys(sel.matchLabels ?? {}).length === 0 && (sel.matchExpressions ?? []).length === 0))
    return undefined;
  return labelSelectorMatcher(sel);
}

function statusOf(objects: Objects, pdb: K8sObject): K8sObject {
  const podType = objects.type('/pods');
  const select = budgetSelector(pdb);
  const pods = select ? objects.list(podType, pdb.metadata.namespace).filter(select) : [];
  // Pods the eviction subresource just let go count as disrupted until they are being deleted or gone.
  const disrupted: Record<string, string> = {};
  for (const [name, at] of Object.entries(pdb.status?.disruptedPods ?? {}))
    if (pods.some((p) => p.metadata.name === name && !p.metadata.deletionTimestamp)) disrupted[name] = String(at);
  const owners = new Map<string, number>();
  for (const p of pods) {
    const ref = (p.metadata.ownerReferences ?? []).find((r: K8sObject) => r.controller && r.kind === 'ReplicaSet');
    const rs = ref && objects.tryGet(objects.type('apps/replicasets'), pdb.metadata.namespace, ref.name);
    if (rs) owners.set(rs.metadata.uid, Number(rs.spec?.replicas ?? 0));
  }
  const bare = pods.filter((p) => !(p.metadata.ownerReferences ?? []).some((r: K8sObject) => r.controller)).length;
  const expectedPods =
    pdb.spec?.minAvailable !== undefined && typeof pdb.spec.minAvailable === 'number'
      ? pods.length
      : [...owners.values()].reduce((a, b) => a + b, 0) + bare;
  const currentHealthy = pods.filter(
    (p) => isPodReady(p) && !p.metadata.deletionTimestamp && !(p.metadata.name in disrupted),
  ).length;
  const desiredHealthy =
    pdb.spec?.minAvailable !== undefined
      ? scaled(pdb.spec.minAvailable, expectedPods)
      : Math.max(0, expectedPods - scaled(pdb.spec?.maxUnavailable ?? 0, expectedPods));
  const disruptionsAllowed = Math.max(0, currentHealthy - desiredHealthy);
  const old = (pdb.status?.conditions ?? []).find((c: K8sObject) => c.type === 'DisruptionAllowed');
  const allowed = disruptionsAllowed > 0 ? 'True' : 'False';
  const condition =
    old?.status === allowed
      ? old
      : {
          type: 'DisruptionAllowed',
          status: allowed,
          reason: allowed === 'True' ? 'SufficientPods' : 'InsufficientPods',
          message: '',
          observedGeneration: pdb.metadata.generation,
          lastTransitionTime: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
        };
  return {
    observedGeneration: pdb.metadata.generation,
    ...(Object.keys(disrupted).length > 0 ? { disruptedPods: disrupted } : {}),
    disruptionsAllowed,
    currentHealthy,
    desiredHealthy,
    expectedPods,
    conditions: [condition],
  };
}

export const disruptionController: Controller = {
  name: 'disruption',
  watches: [PDBS, '/pods', 'apps/replicasets'],
  reconcile(objects) {
    const t = objects.type(PDBS);
    for (const pdb of objects.list(t)) {
      const status = statusOf(objects, pdb);
      if (JSON.stringify(status) === JSON.stringify(pdb.status)) continue;
      objects.update(t, pdb.metadata.namespace, pdb.metadata.name, { ...pdb, status }, { subresource: 'status' });
    }
  },
};

/**
 * The eviction subresource's budget check (kubernetes pkg/registry/core/pod/storage/eviction.go): a pod that is
 * Pending, ended or being deleted goes without one; two budgets are a 500; a budget not yet processed, or one that
 * allows no disruption, is a 429; otherwise one disruption is taken (the pod recorded in disruptedPods).
 */
export function checkEviction(objects: Objects, pod: K8sObject, dryRun: boolean): void {
  if (['Pending', 'Succeeded', 'Failed'].includes(pod.status?.phase) || pod.metadata.deletionTimestamp) return;
  const t = objects.type(PDBS);
  const pdbs = objects.list(t, pod.metadata.namespace).filter((b) => budgetSelector(b)?.(pod));
  if (pdbs.length > 1)
    throw new ApiError(
      500,
      '',
      'This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.',
    );
  const pdb = pdbs[0];
  if (!pdb) return;
  const s = pdb.status ?? {};
  if (!isPodReady(pod) && s.currentHealthy >= s.desiredHealthy && s.desiredHealthy > 0) return;
  const refuse = (retryAfterSeconds: number, message: string) =>
    new ApiError(429, 'TooManyRequests', "Cannot evict pod as it would violate the pod's disruption budget.", {
      ...(retryAfterSeconds ? { retryAfterSeconds } : {}),
      causes: [{ reason: 'DisruptionBudget', message }],
    });
  if ((s.observedGeneration ?? 0) < pdb.metadata.generation)
    throw refuse(10, `The disruption budget ${pdb.metadata.name} is still being processed by the server.`);
  if (!s.disruptionsAllowed)
    throw refuse(
      0,
      `The disruption budget ${pdb.metadata.name} needs ${s.desiredHealthy ?? 0} healthy pods and has ` +
        `${s.currentHealthy ?? 0} currently`,
    );
  if (dryRun) return;
  const status = {
    ...s,
    disruptionsAllowed: s.disruptionsAllowed - 1,
    disruptedPods: {
      ...(s.disruptedPods ?? {}),
      [pod.metadata.name]: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
    },
  };
  objects.update(t, pdb.metadata.namespace, pdb.metadata.name, { ...pdb, status }, { subresource: 'status' });
}
