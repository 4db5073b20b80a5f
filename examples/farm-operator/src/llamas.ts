// Llamas: a namespaced resource kept in memory, the first thing the walkthrough serves (step 2).
import { createHash } from 'node:crypto';
import { GROUP_VERSION } from './api.js';

export interface LlamaSpec {
  /** kg */
  weight: number;
  /** cm */
  height: number;
}

export interface Llama {
  apiVersion: string;
  kind: 'Llama';
  metadata: { name: string; namespace: string; uid: string; resourceVersion: string; creationTimestamp: string };
  spec: LlamaSpec;
}

export interface LlamaList {
  apiVersion: string;
  kind: 'LlamaList';
  metadata: { resourceVersion: string };
  items: Llama[];
}

export interface LlamaSeed {
  namespace: string;
  name: string;
  spec: LlamaSpec;
}

/** The farm's residents when nobody says otherwise. */
export const DEFAULT_LLAMAS: LlamaSeed[] = [
  { namespace: 'default', name: 'dolly', spec: { weight: 130, height: 175 } },
  { namespace: 'default', name: 'fernando', spec: { weight: 160, height: 185 } },
  { namespace: 'kube-system', name: 'kuzco', spec: { weight: 145, height: 180 } },
];

/** The store never changes after start (the resource has only get and list), so one resourceVersion covers it all. */
const STORE_VERSION = '1';

export class LlamaStore {
  private readonly byNamespace = new Map<string, Map<string, Llama>>();

  constructor(seeds: LlamaSeed[] = DEFAULT_LLAMAS, createdAt = new Date()) {
    for (const seed of seeds) {
      const llama: Llama = {
        apiVersion: GROUP_VERSION,
        kind: 'Llama',
        metadata: {
          name: seed.name,
          namespace: seed.namespace,
          uid: uidOf(`${seed.namespace}/${seed.name}`),
          resourceVersion: STORE_VERSION,
          creationTimestamp: createdAt.toISOString().replace(/\.\d+Z$/, 'Z'),
        },
        spec: { ...seed.spec },
      };
      const ns = this.byNamespace.get(seed.namespace) ?? new Map<string, Llama>();
      ns.set(seed.name, llama);
      this.byNamespace.set(seed.namespace, ns);
    }
  }

  /** Llamas of one namespace, or of all namespaces when namespace is undefined; sorted by namespace then name. */
  list(namespace: string | undefined): LlamaList {
    const namespaces = namespace === undefined ? [...this.byNamespace.keys()] : [namespace];
    const items = namespaces
      .flatMap((ns) => [...(this.byNamespace.get(ns)?.values() ?? [])])
      .sort(
        (a, b) =>
          a.metadata.namespace.localeCompare(b.metadata.namespace) || a.metadata.name.localeCompare(b.metadata.name),
      );
    return { apiVersion: GROUP_VERSION, kind: 'LlamaList', metadata: { resourceVersion: STORE_VERSION }, items };
  }

  get(namespace: string, name: string): Llama | undefined {
    return this.byNamespace.get(namespace)?.get(name);
  }
}

/** A stable uid per llama, so that restarts (and the local copy under devop) agree on identity. */
function uidOf(key: string): string {
  const h = createHash('sha256').update(`llama:${key}`).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20, 32)}`;
}
