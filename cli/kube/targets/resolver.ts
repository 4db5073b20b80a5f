// What each workload kind a target can name (pod, deployment, statefulset, rollout) tells target resolution: how to
// read one by name, which names exist (for "not found"), and where its pods come from. One file per kind implements it.
import {
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
  apiregistration: ApiregistrationV1Api;
}

export function kindClients(kc: KubeConfig): KindClients {
  return {
    core: kc.makeApiClient(CoreV1Api),
    apps: kc.makeApiClient(AppsV1Api),
    custom: kc.makeApiClient(CustomObjectsApi),
    apiregistration: kc.makeApiClient(ApiregistrationV1Api),
  };
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
 * A workload read by name: a pod is its own answer; the others name their pods by a label selector — in `namespace`
 * when the kind says where (an APIService's Service), else in the session's namespace.
 */
export type Workload =
  | { kind: 'pod'; pod: V1Pod }
  | { kind: 'selector'; selector: V1LabelSelector | undefined; namespace?: string; extension?: ExtensionBackend };

export interface KindResolver {
  /** How the kind is named in plural in messages ("there are no deployments in it"). */
  readonly plural: string;
  /** The API resource, as RBAC names it (for a 403's hint). */
  readonly resource: string;
  /** Reads the named workload; rejects with the API's error (404: not there) or a UserError that says more. */
  read(clients: KindClients, name: string, namespace: string): Promise<Workload>;
  /** The names of this kind in the namespace. */
  names(clients: KindClients, namespace: string): Promise<string[]>;
}

export type KindResolvers = Readonly<Record<TargetKind, KindResolver>>;
