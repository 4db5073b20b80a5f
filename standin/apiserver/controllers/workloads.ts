// Deployment → ReplicaSet (pod-template-hash, rolling replace, Recreate, scale, revisions) and ReplicaSet → Pods.
import { createHash } from 'node:crypto';
import type { K8sObject } from '../errors.js';
import type { Objects } from '../objects.js';
import { nowTime } from '../objects.js';
import { labelSelectorMatcher } from '../selectors.js';
import { recordEvent } from './events.js';
import { controllerRef, isControlledBy, isPodActive, isPodReady, type Controller } from './loop.js';

const HASH_ALPHABET = 'bcdfghjklmnpqrstvwxz2456789';

/** A stable, DNS-safe hash of a pod template (kube uses FNV-32a of the template, rendered in a safe alphabet). */
export function templateHash(template: K8sObject): string {
  const digest = createHash('sha256')
    .update(canonicalJson(template ?? {}))
    .digest();
  let s = '';
  for (let i = 0; i < 10; i++) s += HASH_ALPHABET[digest[i] % HASH_ALPHABET.length];
  return s;
}

/** JSON with sorted keys and no nulls: templates equal as Go structs (key order, `creationTimestamp: null` from a
 * client) hash equally, as kube's controller compares them. */
function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  if (v && typeof v === 'object') {
    return `{${Object.keys(v)
      .filter((k) => (v as K8sObject)[k] !== undefined && (v as K8sObject)[k] !== null)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonicalJson((v as K8sObject)[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(v);
}

function percentOrInt(v: unknown, total: number, roundUp: boolean): number {
  if (typeof v === 'string' && v.endsWith('%')) {
    const x = (Number(v.slice(0, -1)) * total) / 100;
    return roundUp ? Math.ceil(x) : Math.floor(x);
  }
  return Number(v ?? 0);
}

function revisionOf(rs: K8sObject): number {
  return Number(rs.metadata.annotations?.['deployment.kubernetes.io/revision'] ?? 0);
}

function setReplicas(objects: Objects, rs: K8sObject, n: number, d?: K8sObject): void {
  if (rs.spec.replicas === n) return;
  objects.update(objects.type('apps/replicasets'), rs.metadata.namespace, rs.metadata.name, {
    ...rs,
    spec: { ...rs.spec, replicas: n },
  });
  if (d)
    recordEvent(
      objects,
      d,
      'Normal',
      'ScalingReplicaSet',
      `Scaled ${n > rs.spec.replicas ? 'up' : 'down'} replica set ${rs.metadata.name} from ${rs.spec.replicas} to ${n}`,
      'deployment-controller',
    );
}

function reconcileDeployment(objects: Objects, d: K8sObject): void {
  const ns = d.metadata.namespace;
  const rsType = objects.type('apps/replicasets');
  const rss = objects.store.list('apps/replicasets', ns).filter((rs) => isControlledBy(rs, d.metadata.uid));
  const { 'pod-template-hash': _h, ...templateLabels } = d.spec.template.metadata?.labels ?? {};
  const template = { ...d.spec.template, metadata: { ...(d.spec.template.metadata ?? {}), labels: templateLabels } };
  const hash = templateHash(template);
  const desired: number = d.spec.replicas ?? 1;
  let newRs = rss.find((rs) => rs.metadata.labels?.['pod-template-hash'] === hash);
  const olds = rss.filter((rs) => rs !== newRs).sort((a, b) => revisionOf(a) - revisionOf(b));
  const oldTotal = olds.reduce((n, rs) => n + (rs.spec.replicas ?? 0), 0);
  const recreate = d.spec.strategy?.type === 'Recreate';
  const maxSurge = recreate ? 0 : percentOrInt(d.spec.strategy?.rollingUpdate?.maxSurge ?? '25%', desired, true);
  let maxUnavailable = recreate
    ? desired
    : percentOrInt(d.spec.strategy?.rollingUpdate?.maxUnavailable ?? '25%', desired, false);
  if (maxSurge === 0 && maxUnavailable === 0) maxUnavailable = 1;
  const maxRevision = rss.reduce((n, rs) => Math.max(n, revisionOf(rs)), 0);

  if (!newRs) {
    const initial = recreate
      ? olds.some((rs) => rs.status?.replicas > 0 || rs.spec.replicas > 0)
        ? 0
        : desired
      : Math.max(0, Math.min(desired, desired + maxSurge - oldTotal));
    const labels = { ...templateLabels, 'pod-template-hash': hash };
    newRs = objects.create(rsType, ns, {
      metadata: {
        name: `${d.metadata.name}-${hash}`,
        namespace: ns,
        labels,
        annotations: {
          'deployment.kubernetes.io/desired-replicas': String(desired),
          'deployment.kubernetes.io/max-replicas': String(desired + maxSurge),
          'deployment.kubernetes.io/revision': String(maxRevision + 1),
        },
        ownerReferences: [controllerRef(d)],
      },
      spec: {
        replicas: olds.length === 0 ? desired : initial,
        minReadySeconds: d.spec.minReadySeconds ?? 0,
        selector: {
          ...d.spec.selector,
          matchLabels: { ...(d.spec.selector.matchLabels ?? {}), 'pod-template-hash': hash },
        },
        template: { ...template, metadata: { ...template.metadata, labels } },
      },
    });
  } else if (revisionOf(newRs) < maxRevision) {
    newRs = objects.update(rsType, ns, newRs.metadata.name, {
      ...newRs,
      metadata: {
        ...newRs.metadata,
        annotations: { ...newRs.metadata.annotations, 'deployment.kubernetes.io/revision': String(maxRevision + 1) },
      },
    });
  }
  const cur = newRs!;

  if (recreate) {
    for (const rs of olds) setReplicas(objects, rs, 0, d);
    const oldPods = objects.store
      .list('/pods', ns)
      .filter((p) => olds.some((rs) => isControlledBy(p, rs.metadata.uid)));
    if (oldPods.length === 0) setReplicas(objects, cur, desired, d);
  } else if (olds.every((rs) => (rs.spec.replicas ?? 0) === 0)) {
    setReplicas(objects, cur, desired, d);
  } else {
    const newReplicas = Math.max(cur.spec.replicas, Math.min(desired, desired + maxSurge - oldTotal));
    setReplicas(objects, cur, Math.min(newReplicas, desired), d);
    const minAvailable = desired - maxUnavailable;
    let removable =
      (cur.status?.availableReplicas ?? 0) +
      olds.reduce((n, rs) => n + (rs.status?.availableReplicas ?? 0), 0) -
      minAvailable;
    for (const rs of olds) {
      const unavailable = Math.max(0, (rs.spec.replicas ?? 0) - (rs.status?.availableReplicas ?? 0));
      const cut = Math.min(rs.spec.replicas ?? 0, unavailable + Math.max(0, removable));
      removable -= Math.max(0, cut - unavailable);
      setReplicas(objects, rs, (rs.spec.replicas ?? 0) - cut, d);
    }
  }

  const history = olds.filter((rs) => (rs.spec.replicas ?? 0) === 0 && (rs.status?.replicas ?? 0) === 0);
  for (const rs of history.slice(0, Math.max(0, history.length - (d.spec.revisionHistoryLimit ?? 10)))) {
    objects.delete(rsType, ns, rs.metadata.name, { propagationPolicy: 'Background' });
  }

  const fresh = objects.store.list('apps/replicasets', ns).filter((rs) => isControlledBy(rs, d.metadata.uid));
  const sum = (f: (rs: K8sObject) => number) => fresh.reduce((n, rs) => n + f(rs), 0);
  const newNow = fresh.find((rs) => rs.metadata.name === cur.metadata.name);
  const available = sum((rs) => rs.status?.availableReplicas ?? 0);
  const updated = newNow?.status?.replicas ?? 0;
  const complete =
    updated === desired &&
    sum((rs) => rs.status?.replicas ?? 0) === desired &&
    (newNow?.status?.availableReplicas ?? 0) === desired;
  const oldStatus = d.status ?? {};
  const cond = (type: string, status: boolean, reason: string, message: string) => {
    const prev = (oldStatus.conditions ?? []).find((c: K8sObject) => c.type === type);
    const same = prev && prev.status === (status ? 'True' : 'False') && prev.reason === reason;
    const now = nowTime();
    return {
      type,
      status: status ? 'True' : 'False',
      lastUpdateTime: same ? prev.lastUpdateTime : now,
      lastTransitionTime: prev && prev.status === (status ? 'True' : 'False') ? prev.lastTransitionTime : now,
      reason,
      message,
    };
  };
  const status: K8sObject = {
    observedGeneration: d.metadata.generation,
    replicas: sum((rs) => rs.status?.replicas ?? 0),
    updatedReplicas: updated,
    readyReplicas: sum((rs) => rs.status?.readyReplicas ?? 0),
    availableReplicas: available,
    unavailableReplicas: Math.max(0, desired - available) || undefined,
    conditions: [
      available >= desired - maxUnavailable
        ? cond('Available', true, 'MinimumReplicasAvailable', 'Deployment has minimum availability.')
        : cond('Available', false, 'MinimumReplicasUnavailable', 'Deployment does not have minimum availability.'),
      complete
        ? cond(
            'Progressing',
            true,
            'NewReplicaSetAvailable',
            `ReplicaSet "${cur.metadata.name}" has successfully progressed.`,
          )
        : cond('Progressing', true, 'ReplicaSetUpdated', `ReplicaSet "${cur.metadata.name}" is progressing.`),
    ],
  };
  for (const k of Object.keys(status)) if (status[k] === undefined || status[k] === 0) delete status[k];
  const t = objects.type('apps/deployments');
  const revision = String(revisionOf(newNow ?? cur));
  const latest = objects.store.get('apps/deployments', ns, d.metadata.name);
  if (!latest) return;
  // The revision annotation goes with the status, as the deployment controller's UpdateStatus writes it: an annotation
  // written through the main resource would bump the Deployment's generation.
  const annotations = { ...(latest.metadata.annotations ?? {}), 'deployment.kubernetes.io/revision': revision };
  objects.update(
    t,
    ns,
    d.metadata.name,
    { ...latest, metadata: { ...latest.metadata, annotations }, status },
    { subresource: 'status' },
  );
}

function reconcileReplicaSet(objects: Objects, rs: K8sObject): void {
  const ns = rs.metadata.namespace;
  const podType = objects.type('/pods');
  const owned = objects.store.list('/pods', ns).filter((p) => isControlledBy(p, rs.metadata.uid));
  const active = owned.filter(isPodActive);
  const want: number = rs.spec.replicas ?? 1;
  if (active.length < want) {
    for (let i = active.length; i < want; i++) {
      const tpl = rs.spec.template ?? {};
      const created = objects.create(podType, ns, {
        metadata: {
          generateName: `${rs.metadata.name}-`,
          namespace: ns,
          labels: { ...(tpl.metadata?.labels ?? {}) },
          annotations: tpl.metadata?.annotations,
          ownerReferences: [controllerRef(rs)],
        },
        spec: structuredClone(tpl.spec),
      });
      active.push(created);
      recordEvent(
        objects,
        rs,
        'Normal',
        'SuccessfulCreate',
        `Created pod: ${created.metadata.name}`,
        'replicaset-controller',
      );
    }
  } else if (active.length > want) {
    const rank = (p: K8sObject) => (!p.spec.nodeName ? 0 : p.status?.phase === 'Pending' ? 1 : !isPodReady(p) ? 2 : 3);
    const victims = [...active]
      .sort(
        (a, b) =>
          rank(a) - rank(b) || Date.parse(b.metadata.creationTimestamp) - Date.parse(a.metadata.creationTimestamp),
      )
      .slice(0, active.length - want);
    for (const p of victims) {
      objects.delete(podType, ns, p.metadata.name, {});
      recordEvent(
        objects,
        rs,
        'Normal',
        'SuccessfulDelete',
        `Deleted pod: ${p.metadata.name}`,
        'replicaset-controller',
      );
    }
  }
  const current = objects.store.list('/pods', ns).filter((p) => isControlledBy(p, rs.metadata.uid) && isPodActive(p));
  const match = labelSelectorMatcher(
    rs.spec.template?.metadata ? { matchLabels: rs.spec.template.metadata.labels } : undefined,
  );
  const ready = current.filter(isPodReady).length;
  const status: K8sObject = {
    replicas: current.length,
    fullyLabeledReplicas: current.filter(match).length,
    readyReplicas: ready,
    availableReplicas: ready,
    observedGeneration: rs.metadata.generation,
  };
  for (const k of ['fullyLabeledReplicas', 'readyReplicas', 'availableReplicas']) if (status[k] === 0) delete status[k];
  const latest = objects.store.get('apps/replicasets', ns, rs.metadata.name);
  if (latest)
    objects.update(
      objects.type('apps/replicasets'),
      ns,
      rs.metadata.name,
      { ...latest, status },
      { subresource: 'status' },
    );
}

export const deploymentController: Controller = {
  name: 'deployment',
  watches: ['apps/deployments', 'apps/replicasets', '/pods'],
  reconcile(objects) {
    for (const d of objects.store.list('apps/deployments')) {
      if (d.metadata.deletionTimestamp || d.spec?.paused) continue;
      reconcileDeployment(objects, d);
    }
  },
};

export const replicaSetController: Controller = {
  name: 'replicaset',
  watches: ['apps/replicasets', '/pods'],
  reconcile(objects) {
    for (const rs of objects.store.list('apps/replicasets')) {
      if (rs.metadata.deletionTimestamp) continue;
      reconcileReplicaSet(objects, rs);
    }
  },
};
