// The real PodLister: pods from the Kubernetes API with @kubernetes/client-node (in-cluster when run as a pod).
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import type { PodLister } from './farmpods.js';

/**
 * In a pod (KUBERNETES_SERVICE_HOST set) the service account is used; elsewhere — e.g. under `devop exec`, which keeps
 * KUBERNETES_SERVICE_* out of the local env — the local kubeconfig ($KUBECONFIG or ~/.kube/config).
 */
export function loadKubeConfig(env: NodeJS.ProcessEnv = process.env): KubeConfig {
  const kc = new KubeConfig();
  if (env.KUBERNETES_SERVICE_HOST) {
    kc.loadFromCluster();
    return kc;
  }
  try {
    kc.loadFromDefault();
  } catch (err) {
    throw new Error(
      `farm-operator: cannot load the kubeconfig (${err instanceof Error ? err.message : String(err)}). Fix: point ` +
        `KUBECONFIG at a readable kubeconfig.`,
    );
  }
  // loadFromDefault quietly falls back to http://localhost:8080 when it finds nothing; say so instead.
  if (!kc.getCurrentContext() || !kc.getCurrentCluster()) {
    throw new Error(
      'farm-operator: no Kubernetes context found. Fix: set KUBECONFIG or run in a pod with a service account.',
    );
  }
  return kc;
}

export function kubePodLister(kc: KubeConfig): PodLister {
  const core = kc.makeApiClient(CoreV1Api);
  return {
    async list(namespace, options) {
      const params = { limit: options.limit, _continue: options.continue, labelSelector: options.labelSelector };
      return namespace === undefined
        ? core.listPodForAllNamespaces(params)
        : core.listNamespacedPod({ namespace, ...params });
    },
  };
}
