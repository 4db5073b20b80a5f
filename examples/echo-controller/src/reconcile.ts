// Reconcile decisions as a pure function: given an Echo and the Deployment that exists (if any), the actions to take.
import type { V1Deployment } from '@kubernetes/client-node';
import {
  API_VERSION,
  ECHO_LABEL,
  FINALIZER,
  KIND,
  MANAGED_BY,
  MANAGED_BY_LABEL,
  type Echo,
  type EchoStatus,
} from './echo.js';

export type Action =
  | { type: 'addFinalizer' }
  | { type: 'createDeployment'; deployment: V1Deployment }
  | { type: 'updateDeployment'; deployment: V1Deployment }
  | { type: 'deleteDeployment'; name: string }
  | { type: 'removeFinalizer' }
  | { type: 'updateStatus'; status: EchoStatus }
  /** A Deployment of that name exists but another owner has it: touching it would fight someone else. */
  | { type: 'conflict'; message: string };

export interface ReconcileOptions {
  image: string;
  /** Port the echo server listens on inside its pod (the image reads PORT). */
  port?: number;
}

const ECHO_PORT = 8080;

export function isOwnedBy(deployment: V1Deployment, echo: Echo): boolean {
  return (deployment.metadata?.ownerReferences ?? []).some((ref) => ref.kind === KIND && ref.uid === echo.metadata.uid);
}

/**
 * The Deployment an Echo asks for: spec.replicas pods of the echo image, owned by the Echo (so it is
 * garbage-collected).
 */
export function desiredDeployment(echo: Echo, options: ReconcileOptions): V1Deployment {
  const name = echo.metadata.name ?? '';
  const port = options.port ?? ECHO_PORT;
  const selector = { [ECHO_LABEL]: name };
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: {
      name,
      namespace: echo.metadata.namespace,
      labels: { 'app.kubernetes.io/name': 'http-echo', [MANAGED_BY_LABEL]: MANAGED_BY, ...selector },
      ownerReferences: [
        {
          apiVersion: API_VERSION,
          kind: KIND,
          name,
          uid: echo.metadata.uid ?? '',
          controller: true,
          blockOwnerDeletion: true,
        },
      ],
    },
    spec: {
      replicas: echo.spec.replicas,
      selector: { matchLabels: selector },
      template: {
        metadata: { labels: { 'app.kubernetes.io/name': 'http-echo', ...selector } },
        spec: {
          containers: [
            {
              name: 'echo',
              image: options.image,
              env: [{ name: 'PORT', value: String(port) }],
              ports: [{ name: 'http', containerPort: port }],
              readinessProbe: { httpGet: { path: '/', port }, periodSeconds: 2 },
            },
          ],
        },
      },
    },
  };
}

function statusFrom(echo: Echo, deployment: V1Deployment | undefined): EchoStatus {
  return {
    replicas: deployment?.status?.replicas ?? 0,
    readyReplicas: deployment?.status?.readyReplicas ?? 0,
    observedGeneration: echo.metadata.generation ?? 0,
  };
}

function sameStatus(a: EchoStatus | undefined, b: EchoStatus): boolean {
  return (
    (a?.replicas ?? 0) === b.replicas &&
    (a?.readyReplicas ?? 0) === b.readyReplicas &&
    a?.observedGeneration === b.observedGeneration
  );
}

function reconcileDeletion(echo: Echo, deployment: V1Deployment | undefined): Action[] {
  if (!(echo.metadata.finalizers ?? []).includes(FINALIZER)) return [];
  if (deployment && isOwnedBy(deployment, echo)) {
    // Already going: its DELETED event brings us back here to remove the finalizer.
    if (deployment.metadata?.deletionTimestamp) return [];
    return [{ type: 'deleteDeployment', name: deployment.metadata?.name ?? '' }];
  }
  return [{ type: 'removeFinalizer' }];
}

/**
 * One pass of the control loop. Actions are taken in order; the executor stops at the first failure and the key is
 * retried, so each decision holds whatever the previous attempt managed to do.
 */
export function reconcile(echo: Echo, deployment: V1Deployment | undefined, options: ReconcileOptions): Action[] {
  if (echo.metadata.deletionTimestamp) return reconcileDeletion(echo, deployment);
  const actions: Action[] = [];
  if (!(echo.metadata.finalizers ?? []).includes(FINALIZER)) actions.push({ type: 'addFinalizer' });

  if (!deployment) {
    actions.push({ type: 'createDeployment', deployment: desiredDeployment(echo, options) });
  } else if (!isOwnedBy(deployment, echo)) {
    return [
      ...actions,
      {
        type: 'conflict',
        message: `deployment ${deployment.metadata?.name} exists and is not owned by echo ${echo.metadata.name}`,
      },
    ];
  } else if (!deployment.metadata?.deletionTimestamp) {
    const container = deployment.spec?.template.spec?.containers[0];
    if (deployment.spec?.replicas !== echo.spec.replicas || container?.image !== options.image) {
      const desired = desiredDeployment(echo, options);
      // Keep what the server owns (resourceVersion, uid, status) and replace only what the Echo decides.
      actions.push({
        type: 'updateDeployment',
        deployment: {
          ...deployment,
          spec: { ...deployment.spec!, replicas: echo.spec.replicas, template: desired.spec!.template },
        },
      });
    }
  }

  const status = statusFrom(echo, deployment && !deployment.metadata?.deletionTimestamp ? deployment : undefined);
  if (!sameStatus(echo.status, status)) actions.push({ type: 'updateStatus', status });
  return actions;
}
