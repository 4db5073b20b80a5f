// What each kind a target can name (pod, deployment, statefulset, rollout, webhook configurations) tells target
// resolution: how to read one by name, which names exist (for "not found"), and where its pods come from. One file per
// kind implements it.
import {
  AdmissionregistrationV1Api,
  ApiregistrationV1Api,
  AppsV1Api,
  CoreV1Api,
  CustomObjectsApi,
  type KubeConfig,
  type V1LabelSelector,
  type V1Pod,
} from '@kubernetes/client-node';
import type { TargetKind } from '../../../shared/target.js';

/** The API clients the resolvers use, made once per resolution. */
export interface KindClients {
  core: CoreV1Api;
  apps: AppsV1Api;
  custom: CustomObjectsApi;
  admission: AdmissionregistrationV1Api;
  apiregistration: ApiregistrationV1Api;
}

export function kindClients(kc: KubeConfig): KindClients {
  return {
    core: kc.makeApiClient(CoreV1Api),
    apps: kc.makeApiClient(AppsV1Api),
    custom: kc.makeApiClient(CustomObjectsApi),
    admission: kc.makeApiClient(AdmissionregistrationV1Api),
    apiregistration: kc.makeApiClient(ApiregistrationV1Api),
  };
}

/** An admission webhook a target reaches, and how long kube-apiserver waits for its answer. */
export interface WebhookInfo {
  name: string;
  timeoutSeconds: number;
}

/**
 * An extension the API server calls (an aggregated APIService): the Service in front of its pods, the port the API
 * server reaches them on (the Service's targetPort, a number or a container port's name) and whether it is Available.
 */
export interface ExtensionBackend {
  kind: 'apiservice';
  name: string;
  service: { namespace: string; name: string; targetPort: number | string };
  /** The APIService's Available condition when it was read ('Unknown' when it has none). */
  available: { status: string; reason?: string; message?: string };
}

/**
 * A workload read by name: a pod is its own answer; the others name their pods by a label selector. What the API
 * server calls (an APIService, webhook configurations) also says where the pods are (their Service's namespace) and
 * which port serves (the Service's targetPort, a number or a container port's name); an APIService carries its
 * Available condition, a webhook configuration the webhooks it answers.
 */
export type Workload =
  | { kind: 'pod'; pod: V1Pod }
  | {
      kind: 'selector';
      selector: V1LabelSelector | undefined;
      namespace?: string;
      targetPort?: number | string;
      extension?: ExtensionBackend;
      webhooks?: WebhookInfo[];
    };

export interface KindResolver {
  /** How the kind is named in plural in messages ("there are no deployments in it"). */
  readonly plural: string;
  /** The API resource, as RBAC names it (for a 403's hint). */
  readonly resource: string;
  /** Not namespaced (APIServices, webhook configurations): "not found" names no namespace. */
  readonly clusterScoped?: boolean;
  /** Reads the named workload; rejects with the API's error (404: not there) or a UserError that says more. */
  read(clients: KindClients, name: string, namespace: string, ref?: { webhook?: string }): Promise<Workload>;
  /** The names of this kind in the namespace. */
  names(clients: KindClients, namespace: string): Promise<string[]>;
}

export type KindResolvers = Readonly<Record<TargetKind, KindResolver>>;
