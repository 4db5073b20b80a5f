// Object semantics shared by the REST handlers and the in-process controllers: create/update/patch/delete with
// resourceVersion conflicts, generation, status subresources, finalizers, deletionTimestamp and graceful pod deletion.
import { admitPodSecurity } from './pod-security.js';
import { ApiError, alreadyExists, badRequest, conflict, notFound, statusSuccess, type K8sObject } from './errors.js';
import type { Catalog } from './catalog.js';
import { applyConfig, recordUpdate } from './field-managers.js';
import {
  defaultContainerList,
  defaultOnCreate,
  defaultOnUpdate,
  newUid,
  randomSuffix,
  validateName,
} from './defaults.js';
import { applyPatch, type PatchKind } from './patch.js';
import { apiVersionOf, storeKey, type ResourceType } from './resources.js';
import type { Store } from './store.js';
import type { IPFamily, ServiceIPs } from './service-ip-families.js';

export interface WriteOptions {
  subresource?: string;
  dryRun?: boolean;
  /**
   * The writer's field manager (fieldManager, else its user-agent's first word): an apply records it as its Apply
   * manager, any other write as an Update manager. In-process writers pass none and record nothing.
   */
  fieldManager?: string;
  force?: boolean;
  /** Passes an admission warning (Pod Security's `warn` level) on to the client as a Warning header. */
  warn?: (text: string) => void;
}

export interface DeleteOptions {
  propagationPolicy?: 'Orphan' | 'Background' | 'Foreground';
  gracePeriodSeconds?: number;
  orphanDependents?: boolean;
  preconditions?: { uid?: string; resourceVersion?: string };
  dryRun?: boolean;
}

export interface ObjectsOptions {
  /** True when a kubelet terminates pods: pod deletion is then graceful (deletionTimestamp first) as on a real node. */
  gracefulPods: () => boolean;
  /** First three octets of the Service ClusterIP range, e.g. `10.96.7`. */
  serviceNet: string;
  /** The IPv6 ClusterIP range's prefix on a dual-stack cluster, e.g. `fd00:244:7:1::` (its /112). */
  serviceNet6?: string;
}

/** Kinds that a PUT may create (AllowCreateOnUpdate in kube-apiserver). */
const CREATE_ON_UPDATE = new Set(['/endpoints', '/events', 'coordination.k8s.io/leases', 'events.k8s.io/events']);
/** Kinds whose status clients cannot set on create. */
const CLEAR_STATUS_ON_CREATE = new Set([
  'apps/deployments',
  'apps/replicasets',
  'batch/jobs',
  '/services',
  'apiregistration.k8s.io/apiservices',
]);

export function nowTime(): string {
  return new Date().toISOString().replace(/\.\d+Z$/, 'Z');
}

/**
 * Everything of an object that counts as its spec for metadata.generation. A Deployment's annotations count too: they
 * are copied to its replica sets (kubernetes pkg/registry/apps/deployment/strategy.go PrepareForUpdate).
 */
function specPart(t: ResourceType, o: K8sObject): string {
  const { metadata, status, kind: _k, apiVersion: _a, ...rest } = o;
  const annotations = storeKey(t) === 'apps/deployments' ? (metadata?.annotations ?? {}) : undefined;
  return JSON.stringify(t.hasStatus ? { ...rest, annotations } : { ...rest, status, annotations });
}

/** Same object, managedFields' times aside: a write that only changes ownership (an apply sharing a field) stores. */
function sameContent(a: K8sObject, b: K8sObject): boolean {
  const owners = (m: unknown) =>
    Array.isArray(m) ? m.map((e) => JSON.stringify(sortKeys({ ...e, time: undefined }))) : undefined;
  const strip = (o: K8sObject) => ({
    ...o,
    metadata: { ...o.metadata, resourceVersion: undefined, managedFields: owners(o.metadata?.managedFields) },
  });
  return JSON.stringify(strip(a)) === JSON.stringify(strip(b));
}

function sortKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (typeof v !== 'object' || v === null) return v;
  return Object.fromEntries(
    Object.entries(v)
      .sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0))
      .map(([k, x]) => [k, sortKeys(x)]),
  );
}

export class Objects {
  constructor(
    readonly store: Store,
    readonly catalog: Catalog,
    private readonly opts: ObjectsOptions,
  ) {}

  type(key: string): ResourceType {
    const t = this.catalog.byKey(key);
    if (!t) throw new Error(`unknown resource type ${key}`);
    return t;
  }

  get(t: ResourceType, ns: string, name: string): K8sObject {
    const o = this.store.get(storeKey(t), t.namespaced ? ns : '', name);
    if (!o) throw notFound(t.group, t.resource, name);
    return this.present(t, o);
  }

  tryGet(t: ResourceType, ns: string, name: string): K8sObject | undefined {
    const o = this.store.get(storeKey(t), t.namespaced ? ns : '', name);
    return o ? this.present(t, o) : undefined;
  }

  list(t: ResourceType, ns?: string): K8sObject[] {
    return this.store.list(storeKey(t), t.namespaced ? ns : undefined).map((o) => this.present(t, o));
  }

  /** The object as served in a given version: custom resources are stored once, served under each version. */
  present(t: ResourceType, o: K8sObject): K8sObject {
    o.apiVersion = apiVersionOf(t);
    o.kind = t.kind;
    return o;
  }

  private checkNamespace(t: ResourceType, ns: string): void {
    if (!t.namespaced) return;
    const nsObj = this.store.get('/namespaces', '', ns);
    if (!nsObj) throw notFound('', 'namespaces', ns);
    if (nsObj.metadata.deletionTimestamp) {
      throw new ApiError(
        403,
        'Forbidden',
        `${t.resource} is forbidden: unable to create new content in namespace ${ns} because it is being terminated`,
        { kind: t.resource },
      );
    }
  }

  /** The cluster's Service families (IPv4 first: the default family) and a free ClusterIP of either. */
  get serviceIPs(): ServiceIPs {
    return {
      families: this.opts.serviceNet6 ? ['IPv4', 'IPv6'] : ['IPv4'],
      allocate: (family) => this.allocateClusterIP(family),
    };
  }

  allocateClusterIP(family: IPFamily = 'IPv4'): string {
    const used = new Set(this.store.list('/services').flatMap((s) => s.spec?.clusterIPs ?? [s.spec?.clusterIP]));
    for (let i = 10; i < 255; i++) {
      const ip = family === 'IPv6' ? `${this.opts.serviceNet6}${i.toString(16)}` : `${this.opts.serviceNet}.${i}`;
      if (!used.has(ip)) return ip;
    }
    throw new ApiError(500, 'InternalError', 'Internal error occurred: failed to allocate a serviceIP: range is full');
  }

  create(t: ResourceType, ns: string, body: K8sObject, w: WriteOptions = {}): K8sObject {
    if (!body || typeof body !== 'object' || Array.isArray(body))
      throw badRequest('the body of the request was in an unknown format');
    const obj: K8sObject = structuredClone(body);
    obj.metadata ??= {};
    if (t.namespaced) {
      if (obj.metadata.namespace && obj.metadata.namespace !== ns) {
        throw badRequest('the namespace of the provided object does not match the namespace sent on the request');
      }
      obj.metadata.namespace = ns;
    } else delete obj.metadata.namespace;
    if (!obj.metadata.name && obj.metadata.generateName)
      obj.metadata.name = `${obj.metadata.generateName}${randomSuffix()}`;
    validateName(t, obj);
    this.checkNamespace(t, ns);
    if (this.store.get(storeKey(t), t.namespaced ? ns : '', obj.metadata.name))
      throw alreadyExists(t.group, t.resource, obj.metadata.name);
    // Pod Security admission sees every pod created, by a client or by a controller (a Job's pods).
    if (storeKey(t) === '/pods') admitPodSecurity(this.store.get('/namespaces', '', ns)?.metadata?.labels, obj, w.warn);
    this.present(t, obj);
    delete obj.metadata.resourceVersion;
    delete obj.metadata.deletionTimestamp;
    delete obj.metadata.deletionGracePeriodSeconds;
    obj.metadata.uid = newUid();
    obj.metadata.creationTimestamp = nowTime();
    if (t.generation) obj.metadata.generation = 1;
    else delete obj.metadata.generation;
    if (CLEAR_STATUS_ON_CREATE.has(storeKey(t)) || (t.custom && t.hasStatus)) delete obj.status;
    defaultOnCreate(t, obj, { serviceIPs: this.serviceIPs });
    if (w.fieldManager !== undefined) recordUpdate(undefined, obj, w.fieldManager, w.subresource, t.schema);
    if (w.dryRun) return obj;
    return this.present(t, this.store.put(storeKey(t), obj));
  }

  update(t: ResourceType, ns: string, name: string, body: K8sObject, w: WriteOptions = {}): K8sObject {
    if (!body || typeof body !== 'object' || Array.isArray(body))
      throw badRequest('the body of the request was in an unknown format');
    const old = this.tryGet(t, ns, name);
    if (!old) {
      if (!w.subresource && CREATE_ON_UPDATE.has(storeKey(t)))
        return this.create(t, ns, { ...body, metadata: { ...body.metadata, name } }, w);
      throw notFound(t.group, t.resource, name);
    }
    if (body.metadata?.name && body.metadata.name !== name) {
      throw badRequest(`the name of the object (${body.metadata.name}) does not match the name on the URL (${name})`);
    }
    const rv = body.metadata?.resourceVersion;
    if (rv && rv !== old.metadata.resourceVersion) {
      throw conflict(
        t.group,
        t.resource,
        name,
        'the object has been modified; please apply your changes to the latest version and try again',
      );
    }
    let next: K8sObject;
    if (w.subresource === 'status') {
      next = { ...old, status: structuredClone(body.status) };
      // A Deployment's status update keeps only the spec and labels (deploymentStatusStrategy PrepareForUpdate): the
      // deployment controller writes its revision annotation this way, which bumps no generation.
      if (storeKey(t) === 'apps/deployments' && body.metadata)
        next.metadata = { ...old.metadata, annotations: structuredClone(body.metadata.annotations) };
    } else if (w.subresource === 'ephemeralcontainers') {
      const eph = structuredClone(body.spec?.ephemeralContainers ?? []);
      defaultContainerList(eph);
      next = { ...old, spec: { ...old.spec, ephemeralContainers: eph } };
    } else {
      next = structuredClone(body);
      next.metadata ??= {};
      if (t.hasStatus) next.status = old.status;
      for (const k of [
        'uid',
        'creationTimestamp',
        'deletionTimestamp',
        'deletionGracePeriodSeconds',
        'generation',
        'namespace',
      ]) {
        if (old.metadata[k] === undefined) delete next.metadata[k];
        else next.metadata[k] = old.metadata[k];
      }
      next.metadata.name = name;
      if (old.metadata.deletionTimestamp) {
        const added = (next.metadata.finalizers ?? []).filter(
          (f: string) => !(old.metadata.finalizers ?? []).includes(f),
        );
        if (added.length > 0)
          throw new ApiError(
            422,
            'Invalid',
            `${t.kind} "${name}" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the ` +
              `object is being deleted, found new finalizers ${JSON.stringify(added)}`,
          );
      }
      if (storeKey(t) === '/services' && old.spec?.clusterIP && !next.spec?.clusterIP) {
        next.spec = { ...next.spec, clusterIP: old.spec.clusterIP, clusterIPs: old.spec.clusterIPs };
      }
      defaultOnUpdate(t, next);
    }
    this.present(t, next);
    if (w.fieldManager !== undefined) recordUpdate(old, next, w.fieldManager, w.subresource, t.schema);
    next.metadata.resourceVersion = old.metadata.resourceVersion;
    // A status update moves no generation (the status strategies' PrepareForUpdate leave it as it was).
    if (t.generation && w.subresource !== 'status' && specPart(t, next) !== specPart(t, old))
      next.metadata.generation = (old.metadata.generation ?? 1) + 1;
    if (sameContent(next, old)) return old;
    if (w.dryRun) return next;
    if (
      next.metadata.deletionTimestamp &&
      (next.metadata.finalizers ?? []).length === 0 &&
      !this.waitsForKubelet(t, next)
    ) {
      return this.present(t, this.store.remove(storeKey(t), ns, name) ?? next);
    }
    return this.present(t, this.store.put(storeKey(t), next));
  }

  patch(t: ResourceType, ns: string, name: string, kind: PatchKind, patch: K8sObject, w: WriteOptions = {}): K8sObject {
    if (t.custom && kind === 'strategic') {
      throw new ApiError(
        415,
        'UnsupportedMediaType',
        'the body of the request was in an unknown format - accepted media types include: ' +
          'application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml',
      );
    }
    const old = this.tryGet(t, ns, name);
    const manager = w.fieldManager ?? '';
    if (!old) {
      if (kind === 'apply' && !w.subresource) {
        const created = { ...structuredClone(patch), metadata: { ...patch.metadata, name } };
        const applied = applyConfig(undefined, created, manager, w.force === true, t.schema);
        return this.create(t, ns, applied, { ...w, fieldManager: undefined });
      }
      throw notFound(t.group, t.resource, name);
    }
    if (kind === 'apply') {
      // The apply merges by the kind's schema and records its own manager; the write records no Update on top.
      const applied = applyConfig(old, patch, manager, w.force === true, t.schema);
      return this.update(t, ns, name, applied, { ...w, fieldManager: undefined });
    }
    const patched = applyPatch(kind, old, patch);
    if (!patched || typeof patched !== 'object') throw badRequest('the patch produced something that is not an object');
    return this.update(t, ns, name, patched, w);
  }

  /**
   * A pod that a kubelet still has to stop keeps existing (with deletionTimestamp) until the kubelet deletes it with
   * grace 0.
   */
  private waitsForKubelet(t: ResourceType, o: K8sObject): boolean {
    return storeKey(t) === '/pods' && o.metadata.deletionGracePeriodSeconds > 0;
  }

  /** Returns the deleted object (deleted: true) or the object now pending deletion (deleted: false). */
  delete(t: ResourceType, ns: string, name: string, d: DeleteOptions = {}): { object: K8sObject; deleted: boolean } {
    const old = this.get(t, ns, name);
    const pre = d.preconditions ?? {};
    // Checked before anything else, naming the kind (apiserver pkg/registry/rest/delete.go BeforeDelete).
    if (pre.uid && pre.uid !== old.metadata.uid) {
      throw conflict(
        t.group,
        t.kind,
        name,
        `the UID in the precondition (${pre.uid}) does not match the UID in record (${old.metadata.uid}). The ` +
          'object might have been deleted and then recreated',
      );
    }
    if (pre.resourceVersion && pre.resourceVersion !== old.metadata.resourceVersion) {
      throw conflict(
        t.group,
        t.kind,
        name,
        `the ResourceVersion in the precondition (${pre.resourceVersion}) does not match the ResourceVersion in ` +
          `record (${old.metadata.resourceVersion}). The object might have been modified`,
      );
    }
    const key = storeKey(t);
    const policy =
      d.propagationPolicy ??
      (d.orphanDependents === true
        ? 'Orphan'
        : d.orphanDependents === false
          ? 'Background'
          : key === 'batch/jobs'
            ? 'Orphan'
            : 'Background');
    const next = structuredClone(old);
    const finalizers: string[] = [...(old.metadata.finalizers ?? [])];
    if (policy === 'Foreground' && !finalizers.includes('foregroundDeletion')) finalizers.push('foregroundDeletion');
    if (policy === 'Orphan' && !finalizers.includes('orphan') && !old.metadata.deletionTimestamp)
      finalizers.push('orphan');
    next.metadata.finalizers = finalizers.length ? finalizers : undefined;
    if (next.metadata.finalizers === undefined) delete next.metadata.finalizers;

    if (key === '/pods') {
      const terminal = ['Succeeded', 'Failed'].includes(old.status?.phase);
      let grace =
        d.gracePeriodSeconds ??
        old.metadata.deletionGracePeriodSeconds ??
        old.spec?.terminationGracePeriodSeconds ??
        30;
      if (!old.spec?.nodeName || terminal || !this.opts.gracefulPods()) grace = 0;
      if (old.metadata.deletionGracePeriodSeconds !== undefined)
        grace = Math.min(grace, old.metadata.deletionGracePeriodSeconds);
      next.metadata.deletionGracePeriodSeconds = grace;
      if (!old.metadata.deletionTimestamp || grace < (old.metadata.deletionGracePeriodSeconds ?? Infinity)) {
        next.metadata.deletionTimestamp = new Date(Date.now() + grace * 1000).toISOString().replace(/\.\d+Z$/, 'Z');
      }
      if (grace > 0 || finalizers.length > 0) return this.markDeleting(t, next, old, d);
      return this.removeNow(t, ns, name, old, d);
    }
    if (key === '/namespaces') {
      next.status = { ...(next.status ?? {}), phase: 'Terminating' };
      next.metadata.deletionTimestamp ??= nowTime();
      next.metadata.deletionGracePeriodSeconds ??= 0;
      return this.markDeleting(t, next, old, d);
    }
    if (finalizers.length > 0) {
      next.metadata.deletionTimestamp ??= nowTime();
      next.metadata.deletionGracePeriodSeconds ??= 0;
      return this.markDeleting(t, next, old, d);
    }
    return this.removeNow(t, ns, name, old, d);
  }

  private markDeleting(t: ResourceType, next: K8sObject, old: K8sObject, d: DeleteOptions) {
    if (sameContent(next, old)) return { object: old, deleted: false };
    // kube-apiserver answers a dry run with the object as the delete would leave it (deletionTimestamp set).
    if (d.dryRun) return { object: this.present(t, next), deleted: false };
    return { object: this.present(t, this.store.put(storeKey(t), next)), deleted: false };
  }

  private removeNow(t: ResourceType, ns: string, name: string, old: K8sObject, d: DeleteOptions) {
    if (d.dryRun) return { object: old, deleted: true };
    const gone = this.store.remove(storeKey(t), t.namespaced ? ns : '', name) ?? old;
    return { object: this.present(t, gone), deleted: true };
  }

  /** The body kube-apiserver answers a DELETE with: the object for pods and pending deletions, else a Status. */
  deleteResponse(t: ResourceType, r: { object: K8sObject; deleted: boolean }): K8sObject {
    if (!r.deleted || storeKey(t) === '/pods' || t.custom) return r.object;
    return statusSuccess({
      name: r.object.metadata.name,
      group: t.group || undefined,
      kind: t.resource,
      uid: r.object.metadata.uid,
    });
  }
}
