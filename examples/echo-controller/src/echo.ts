// The Echo custom resource (echoes.example.com/v1) as the controller sees it, and the names it shares with the CRD.
import type { V1ObjectMeta } from '@kubernetes/client-node';

export const GROUP = 'example.com';
export const VERSION = 'v1';
export const PLURAL = 'echoes';
export const KIND = 'Echo';
export const API_VERSION = `${GROUP}/${VERSION}`;
/** Held on every Echo this controller manages, so deleting an Echo waits until its Deployment is gone. */
export const FINALIZER = 'example.com/echo-deployment';
/** Labels the controller puts on its Deployments; the Deployment watch selects on MANAGED_BY. */
export const MANAGED_BY_LABEL = 'app.kubernetes.io/managed-by';
export const MANAGED_BY = 'echo-controller';
export const ECHO_LABEL = 'example.com/echo';
export const DEFAULT_ECHO_IMAGE = 'devop.test/http-echo';

export interface EchoSpec {
  replicas: number;
}

export interface EchoStatus {
  replicas?: number;
  readyReplicas?: number;
  observedGeneration?: number;
}

export interface Echo {
  apiVersion: string;
  kind: string;
  metadata: V1ObjectMeta;
  spec: EchoSpec;
  status?: EchoStatus;
}

/** The work queue's key for an object: namespace/name. */
export function keyOf(meta: { namespace?: string; name?: string }): string {
  return `${meta.namespace ?? ''}/${meta.name ?? ''}`;
}

export function splitKey(key: string): { namespace: string; name: string } {
  const slash = key.indexOf('/');
  return { namespace: key.slice(0, slash), name: key.slice(slash + 1) };
}
