// Garbage collector (ownerReferences: background, foreground, orphan) and namespace deletion.
import type { K8sObject } from '../errors.js';
import type { Objects } from '../objects.js';
import type { Controller } from './loop.js';

function withoutFinalizer(o: K8sObject, f: string): K8sObject {
  return {
    ...o,
    metadata: { ...o.metadata, finalizers: (o.metadata.finalizers ?? []).filter((x: string) => x !== f) },
  };
}

export const garbageCollector: Controller = {
  name: 'garbage-collector',
  reconcile(objects: Objects) {
    const all: { key: string; o: K8sObject }[] = [];
    for (const key of objects.store.keys()) {
      const items = objects.store.list(key);
      // Custom resources whose CRD is gone go with it (kube-apiserver's customresourcecleanup finalizer).
      if (!objects.catalog.byKey(key)) {
        for (const o of items) objects.store.remove(key, o.metadata.namespace ?? '', o.metadata.name);
        continue;
      }
      for (const o of items) all.push({ key, o });
    }
    const byUid = new Map(all.map((e) => [e.o.metadata.uid as string, e]));
    const dependents = new Map<string, { key: string; o: K8sObject }[]>();
    for (const e of all) {
      for (const ref of e.o.metadata.ownerReferences ?? []) {
        dependents.set(ref.uid, [...(dependents.get(ref.uid) ?? []), e]);
      }
    }
    for (const { key, o } of all) {
      const refs: K8sObject[] = o.metadata.ownerReferences ?? [];
      if (refs.length === 0) continue;
      const t = objects.catalog.byKey(key);
      if (!t) continue;
      const ns = o.metadata.namespace ?? '';
      const owners = refs.map((r) => {
        const owner = byUid.get(r.uid)?.o;
        // Owners are namespace-local (or cluster-scoped): a same-uid object elsewhere is not an owner.
        return owner && (!owner.metadata.namespace || owner.metadata.namespace === ns) ? owner : undefined;
      });
      const orphaning = refs.filter(
        (_, i) => owners[i]?.metadata.deletionTimestamp && owners[i]!.metadata.finalizers?.includes('orphan'),
      );
      if (orphaning.length > 0) {
        const keep = refs.filter((r) => !orphaning.includes(r));
        objects.update(t, ns, o.metadata.name, {
          ...o,
          metadata: { ...o.metadata, ownerReferences: keep.length ? keep : undefined },
        });
        continue;
      }
      if (o.metadata.deletionTimestamp) continue;
      if (owners.every((w) => w === undefined)) {
        objects.delete(t, ns, o.metadata.name, { propagationPolicy: 'Background' });
      } else if (
        owners.some((w) => w?.metadata.deletionTimestamp && w.metadata.finalizers?.includes('foregroundDeletion'))
      ) {
        objects.delete(t, ns, o.metadata.name, { propagationPolicy: 'Foreground' });
      } else if (owners.some((w) => w === undefined)) {
        const keep = refs.filter((_, i) => owners[i] !== undefined);
        objects.update(t, ns, o.metadata.name, { ...o, metadata: { ...o.metadata, ownerReferences: keep } });
      }
    }
    for (const { key, o } of all) {
      if (!o.metadata.deletionTimestamp) continue;
      const t = objects.catalog.byKey(key);
      if (!t) continue;
      const deps = dependents.get(o.metadata.uid) ?? [];
      const fins: string[] = o.metadata.finalizers ?? [];
      const ns = o.metadata.namespace ?? '';
      if (fins.includes('orphan') && deps.length === 0)
        objects.update(t, ns, o.metadata.name, withoutFinalizer(o, 'orphan'));
      else if (fins.includes('foregroundDeletion') && deps.length === 0)
        objects.update(t, ns, o.metadata.name, withoutFinalizer(o, 'foregroundDeletion'));
    }
  },
};

export const namespaceController: Controller = {
  name: 'namespace',
  reconcile(objects: Objects) {
    for (const nsObj of objects.store.list('/namespaces')) {
      if (!nsObj.metadata.deletionTimestamp) continue;
      const ns = nsObj.metadata.name;
      let remaining = 0;
      for (const t of objects.catalog.all()) {
        if (!t.namespaced) continue;
        for (const o of objects.store.list(`${t.group}/${t.resource}`, ns)) {
          remaining++;
          if (!o.metadata.deletionTimestamp)
            objects.delete(t, ns, o.metadata.name, { propagationPolicy: 'Background' });
        }
      }
      if (remaining > 0) continue;
      if ((nsObj.spec?.finalizers ?? []).length > 0) {
        objects.store.put('/namespaces', { ...nsObj, spec: { ...nsObj.spec, finalizers: [] } });
      } else if ((nsObj.metadata.finalizers ?? []).length === 0) {
        objects.store.remove('/namespaces', '', ns);
      }
    }
  },
};
