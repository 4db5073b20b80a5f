// Finds the resource type for a request: built-ins plus custom resources of established CRDs (recomputed on CRD
// change).
import type { K8sObject } from './errors.js';
import { builtinResources, resourcesFromCrd, storeKey, type ResourceType } from './resources.js';
import type { Store } from './store.js';

export const CRD_KEY = 'apiextensions.k8s.io/customresourcedefinitions';

export class Catalog {
  private readonly builtins = builtinResources();
  private custom: ResourceType[] = [];

  constructor(private readonly store: Store) {
    store.subscribe((ev) => {
      if (ev.key === CRD_KEY) this.refresh();
    });
  }

  refresh(): void {
    this.custom = this.store.list(CRD_KEY).filter(isEstablished).flatMap(resourcesFromCrd);
  }

  all(): ResourceType[] {
    return [...this.builtins, ...this.custom];
  }

  find(group: string, version: string, resource: string): ResourceType | undefined {
    return this.all().find((t) => t.group === group && t.version === version && t.resource === resource);
  }

  /** The type with this storage key (any served version; built-ins have one). */
  byKey(key: string): ResourceType | undefined {
    return this.all().find((t) => storeKey(t) === key);
  }

  byKind(apiVersion: string, kind: string): ResourceType | undefined {
    const [group, version] = apiVersion.includes('/') ? apiVersion.split('/') : ['', apiVersion];
    return this.all().find((t) => t.group === group && t.version === version && t.kind === kind);
  }

  /** Group → versions served, in discovery order (built-in first). */
  groups(): Map<string, string[]> {
    const out = new Map<string, string[]>();
    for (const t of this.all()) {
      const vs = out.get(t.group) ?? [];
      if (!vs.includes(t.version)) vs.push(t.version);
      out.set(t.group, vs);
    }
    return out;
  }
}

export function isEstablished(crd: K8sObject): boolean {
  return (
    !crd.metadata.deletionTimestamp &&
    (crd.status?.conditions ?? []).some((c: K8sObject) => c.type === 'Established' && c.status === 'True')
  );
}
