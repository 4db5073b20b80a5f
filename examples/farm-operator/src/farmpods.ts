// FarmPods: the namespace's pods seen from the farm (step 3) — a read-only view built from the real pod list.
import type { V1Pod } from '@kubernetes/client-node';
import { GROUP_VERSION } from './api.js';

export interface PodPage {
  items: V1Pod[];
  metadata?: { resourceVersion?: string; _continue?: string; remainingItemCount?: number };
}

export interface PodListOptions {
  limit?: number;
  continue?: string;
  labelSelector?: string;
}

/** Where the pods come from: the Kubernetes API in the example, a fixed list in unit tests. */
export interface PodLister {
  /** namespace undefined = all namespaces. */
  list(namespace: string | undefined, options: PodListOptions): Promise<PodPage>;
}

export interface FarmPod {
  apiVersion: string;
  kind: 'FarmPod';
  metadata: { name: string; namespace?: string; creationTimestamp?: string; labels?: Record<string, string> };
  spec: { containers: number };
}

export interface FarmPodList {
  apiVersion: string;
  kind: 'FarmPodList';
  metadata: { resourceVersion?: string; continue?: string; remainingItemCount?: number };
  items: FarmPod[];
}

function timestamp(t: Date | string | undefined): string | undefined {
  if (t === undefined) return undefined;
  return (t instanceof Date ? t.toISOString() : t).replace(/\.\d+Z$/, 'Z');
}

export function toFarmPod(pod: V1Pod): FarmPod {
  const meta = pod.metadata ?? {};
  return {
    apiVersion: GROUP_VERSION,
    kind: 'FarmPod',
    metadata: {
      name: `farm-${meta.name ?? ''}`,
      namespace: meta.namespace,
      creationTimestamp: timestamp(meta.creationTimestamp),
      ...(meta.labels ? { labels: { ...meta.labels } } : {}),
    },
    spec: { containers: pod.spec?.containers?.length ?? 0 },
  };
}

/** One FarmPod per pod; the list's resourceVersion and continue token are the pod list's, so paging works through. */
export function toFarmPodList(page: PodPage): FarmPodList {
  const meta = page.metadata ?? {};
  return {
    apiVersion: GROUP_VERSION,
    kind: 'FarmPodList',
    metadata: {
      ...(meta.resourceVersion !== undefined ? { resourceVersion: meta.resourceVersion } : {}),
      ...(meta._continue ? { continue: meta._continue } : {}),
      ...(meta.remainingItemCount !== undefined ? { remainingItemCount: meta.remainingItemCount } : {}),
    },
    items: page.items.map(toFarmPod),
  };
}
