// The Leases a shadowed command sees: kept in memory by the shadow API proxy, never read from or written to the
// cluster, so that the local controller's leader election wins (GET 404 → create, then updates with resourceVersion, as
// client-go's LeaseLock and client-node callers do) while the real leader keeps its Lease in the cluster.
import { randomUUID } from 'node:crypto';

/** A Kubernetes object as JSON (only metadata is looked at). */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata?: { name?: string; namespace?: string; resourceVersion?: string; [key: string]: unknown };
  [key: string]: unknown;
}

/** What the proxy answers, and what changed in memory (for the `write` event). */
export interface LeaseAnswer {
  status: number;
  body: KubeObject;
  /** Set when memory changed: the Lease before (null: it did not exist) and after (null: deleted). */
  change?: { before: KubeObject | null; after: KubeObject | null };
}

export interface LeaseRequest {
  method: string;
  /** coordination.k8s.io/v1 (or v1beta1): the apiVersion of the answers. */
  apiVersion: string;
  namespace: string;
  /** Absent on a POST to the collection. */
  name?: string;
  body?: KubeObject;
  /** The request's Content-Type (PATCH: merge and strategic merge patches are the same for a Lease). */
  contentType?: string;
}

const GROUP = 'coordination.k8s.io';

/** A Kubernetes Status body with the code and reason a kube-apiserver would send. */
export function statusBody(code: number, reason: string, message: string, name?: string): KubeObject {
  return {
    kind: 'Status',
    apiVersion: 'v1',
    metadata: {},
    status: code < 400 ? 'Success' : 'Failure',
    message,
    reason,
    ...(name !== undefined ? { details: { name, group: GROUP, kind: 'leases' } } : {}),
    code,
  };
}

/** RFC 7386 merge patch: null removes a key, objects merge, everything else replaces. */
export function mergePatch(target: unknown, patch: unknown): unknown {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) return patch;
  const out: Record<string, unknown> =
    target !== null && typeof target === 'object' && !Array.isArray(target)
      ? { ...(target as Record<string, unknown>) }
      : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete out[key];
    else out[key] = mergePatch(out[key], value);
  }
  return out;
}

/** The in-memory Leases of one shadow session. */
export class LeaseMemory {
  private readonly leases = new Map<string, KubeObject>();
  private version = 0;

  handle(r: LeaseRequest): LeaseAnswer {
    const key = (name: string): string => `${r.namespace}/${name}`;
    const notFound = (name: string): LeaseAnswer => ({
      status: 404,
      body: statusBody(404, 'NotFound', `leases.${GROUP} "${name}" not found`, name),
    });
    switch (r.method) {
      case 'GET': {
        const lease = r.name ? this.leases.get(key(r.name)) : undefined;
        return lease ? { status: 200, body: structuredClone(lease) } : notFound(r.name ?? '');
      }
      case 'POST': {
        const name = r.body?.metadata?.name ?? r.name;
        if (!name) return invalid('metadata.name: Required value: name or generateName is required');
        if (this.leases.has(key(name)))
          return {
            status: 409,
            body: statusBody(409, 'AlreadyExists', `leases.${GROUP} "${name}" already exists`, name),
          };
        return this.store(r, name, undefined, r.body ?? {}, 201);
      }
      case 'PUT':
      case 'PATCH': {
        if (!r.name) return invalid('a Lease is updated by name');
        const old = this.leases.get(key(r.name));
        let next = r.body ?? {};
        if (r.method === 'PATCH') {
          if (!old) return notFound(r.name);
          if (!/merge-patch\+json|strategic-merge-patch\+json/.test(r.contentType ?? ''))
            return {
              status: 415,
              body: statusBody(
                415,
                'UnsupportedMediaType',
                'devop --shadow keeps Leases in memory and patches them with merge patches only ' +
                  '(application/merge-patch+json)',
              ),
            };
          next = mergePatch(old, next) as KubeObject;
        } else if (old) {
          const rv = next.metadata?.resourceVersion;
          if (rv && rv !== old.metadata?.resourceVersion)
            return {
              status: 409,
              body: statusBody(
                409,
                'Conflict',
                `Operation cannot be fulfilled on leases.${GROUP} "${r.name}": the object has been modified; ` +
                  'please apply your changes to the latest version and try again',
                r.name,
              ),
            };
        }
        // A PUT may create a Lease (kube-apiserver allows create on update for Leases).
        return this.store(r, r.name, old, next, old ? 200 : 201);
      }
      case 'DELETE': {
        if (!r.name) return invalid('a Lease is deleted by name');
        const old = this.leases.get(key(r.name));
        if (!old) return notFound(r.name);
        this.leases.delete(key(r.name));
        return {
          status: 200,
          body: statusBody(200, 'Success', `lease ${r.name} deleted`, r.name),
          change: { before: old, after: null },
        };
      }
      default:
        return { status: 405, body: statusBody(405, 'MethodNotAllowed', `${r.method} is not allowed on a Lease`) };
    }
  }

  private store(r: LeaseRequest, name: string, old: KubeObject | undefined, body: KubeObject, status: number) {
    const meta = old?.metadata ?? {};
    const lease: KubeObject = {
      ...structuredClone(body),
      apiVersion: r.apiVersion,
      kind: 'Lease',
      metadata: {
        ...structuredClone(body.metadata ?? {}),
        name,
        namespace: r.namespace,
        uid: meta.uid ?? randomUUID(),
        creationTimestamp: meta.creationTimestamp ?? new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
        resourceVersion: String(++this.version),
      },
    };
    this.leases.set(`${r.namespace}/${name}`, lease);
    return { status, body: structuredClone(lease), change: { before: old ?? null, after: lease } };
  }
}

function invalid(message: string): LeaseAnswer {
  return { status: 422, body: statusBody(422, 'Invalid', `Lease is invalid: ${message}`) };
}
