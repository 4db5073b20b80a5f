// Where the API server's own connections to a pod come from (an aggregated API's requests, a webhook's calls): the
// addresses it advertises in the `kubernetes` Endpoints. When one of them is the pod's node (kind, minikube, any
// single-node cluster), its requests arrive from the node's address — the one devop leaves alone for kubelet probes.
import { CoreV1Api, type KubeConfig, type V1Pod } from '@kubernetes/client-node';

export type ApiServerSource =
  | { known: true; onPodNode: boolean; addresses: string[]; nodeIP: string }
  | { known: false; why: string };

/** Whether the API server connects to `pod` from the pod's node address. Reads default/kubernetes (Endpoints). */
export async function apiServerSource(kc: KubeConfig, pod: V1Pod): Promise<ApiServerSource> {
  const nodeIPs = new Set([pod.status?.hostIP, ...(pod.status?.hostIPs ?? []).map((h) => h.ip)].filter(Boolean));
  const nodeIP = pod.status?.hostIP ?? [...nodeIPs][0];
  if (!nodeIP) return { known: false, why: `pod ${pod.metadata?.name} reports no node address (status.hostIP)` };
  let addresses: string[];
  try {
    const endpoints = await kc
      .makeApiClient(CoreV1Api)
      .readNamespacedEndpoints({ name: 'kubernetes', namespace: 'default' });
    addresses = (endpoints.subsets ?? []).flatMap((s) => (s.addresses ?? []).map((a) => a.ip));
  } catch (err) {
    const code = (err as { code?: number }).code;
    return { known: false, why: `could not read endpoints default/kubernetes${code ? ` (HTTP ${code})` : ''}` };
  }
  if (addresses.length === 0) return { known: false, why: 'endpoints default/kubernetes list no address' };
  return { known: true, onPodNode: addresses.some((a) => nodeIPs.has(a)), addresses, nodeIP };
}
