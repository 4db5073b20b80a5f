// The Echo controller: watches Echoes and their Deployments, queues keys, reconciles one key at a time, applies
// actions.
import { AppsV1Api, CustomObjectsApi, type KubeConfig, type V1Deployment } from '@kubernetes/client-node';
import {
  API_VERSION,
  DEFAULT_ECHO_IMAGE,
  FINALIZER,
  GROUP,
  KIND,
  MANAGED_BY,
  MANAGED_BY_LABEL,
  PLURAL,
  VERSION,
  keyOf,
  splitKey,
  type Echo,
} from './echo.js';
import { ListWatch } from './listwatch.js';
import { WorkQueue } from './queue.js';
import { reconcile, type Action } from './reconcile.js';

export interface EchoControllerOptions {
  kubeConfig: KubeConfig;
  /** Watch one namespace, or all when undefined. */
  namespace?: string;
  image?: string;
  log?: (line: string) => void;
}

/** One line for the log: the API's Status message when there is one (client-node's errors span several lines). */
export function errorLine(err: unknown): string {
  const e = err as { code?: unknown; body?: unknown; message?: unknown } | undefined;
  if (typeof e?.code === 'number' && e.body !== undefined) {
    let message: unknown;
    try {
      message = (typeof e.body === 'string' ? JSON.parse(e.body) : e.body)?.message;
    } catch {
      message = undefined;
    }
    return `HTTP ${e.code}${typeof message === 'string' ? `: ${message}` : ''}`;
  }
  return (err instanceof Error ? err.message : String(err)).split('\n')[0];
}

function statusCode(err: unknown): number | undefined {
  const code = (err as { code?: unknown } | undefined)?.code;
  return typeof code === 'number' ? code : undefined;
}

async function orUndefinedOn404<T>(p: Promise<T>): Promise<T | undefined> {
  try {
    return await p;
  } catch (err) {
    if (statusCode(err) === 404) return undefined;
    throw err;
  }
}

export class EchoController {
  private readonly apps: AppsV1Api;
  private readonly custom: CustomObjectsApi;
  private readonly queue: WorkQueue;
  private readonly watches: { stop(): void }[] = [];
  private readonly image: string;
  private readonly log: (line: string) => void;

  constructor(private readonly options: EchoControllerOptions) {
    this.apps = options.kubeConfig.makeApiClient(AppsV1Api);
    this.custom = options.kubeConfig.makeApiClient(CustomObjectsApi);
    this.image = options.image ?? DEFAULT_ECHO_IMAGE;
    this.log = options.log ?? (() => undefined); // quiet unless the caller wants lines
    this.queue = new WorkQueue({
      onError: (key, err, retryInMs) =>
        this.log(`reconcile ${key} failed (retry in ${retryInMs}ms): ${errorLine(err)}`),
    });
  }

  /** Starts both watches and the worker; resolves when stop() is called. */
  run(): Promise<void> {
    const ns = this.options.namespace;
    const nsPath = ns ? `/namespaces/${ns}` : '';
    const echoes = new ListWatch<Echo>({
      kubeConfig: this.options.kubeConfig,
      path: `/apis/${GROUP}/${VERSION}${nsPath}/${PLURAL}`,
      list: async () =>
        (ns
          ? await this.custom.listNamespacedCustomObject({
              group: GROUP,
              version: VERSION,
              namespace: ns,
              plural: PLURAL,
            })
          : await this.custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural: PLURAL })) as {
          items: Echo[];
          metadata?: { resourceVersion?: string };
        },
      onEvent: (_type, echo) => this.queue.add(keyOf(echo.metadata)),
      onError: (err) => this.log(`watch echoes: ${errorLine(err)}`),
    });
    const labelSelector = `${MANAGED_BY_LABEL}=${MANAGED_BY}`;
    const deployments = new ListWatch<V1Deployment>({
      kubeConfig: this.options.kubeConfig,
      path: `/apis/apps/v1${nsPath}/deployments`,
      labelSelector,
      list: () =>
        ns
          ? this.apps.listNamespacedDeployment({ namespace: ns, labelSelector })
          : this.apps.listDeploymentForAllNamespaces({ labelSelector }),
      // A change to a Deployment (deleted, scaled by hand, pods ready) is a reason to look at its Echo again.
      onEvent: (_type, deployment) => {
        const owner = deployment.metadata?.ownerReferences?.find(
          (r) => r.kind === KIND && r.apiVersion === API_VERSION,
        );
        if (owner) this.queue.add(keyOf({ namespace: deployment.metadata?.namespace, name: owner.name }));
      },
      onError: (err) => this.log(`watch deployments: ${errorLine(err)}`),
    });
    this.watches.push(echoes, deployments);
    echoes.start();
    deployments.start();
    return this.queue.run((key) => this.reconcileKey(key));
  }

  stop(): void {
    for (const w of this.watches) w.stop();
    this.queue.stop();
  }

  private async reconcileKey(key: string): Promise<void> {
    const { namespace, name } = splitKey(key);
    // Read fresh state rather than trusting the watch's copy: the decision must see our own last writes.
    const echo = (await orUndefinedOn404(
      this.custom.getNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural: PLURAL, name }),
    )) as Echo | undefined;
    if (!echo) return;
    const deployment = await orUndefinedOn404(this.apps.readNamespacedDeployment({ namespace, name }));
    const actions = reconcile(echo, deployment, { image: this.image });
    let current = echo;
    for (const action of actions) current = await this.apply(current, action);
  }

  private async replaceEcho(echo: Echo): Promise<Echo> {
    const { namespace = '', name = '' } = echo.metadata;
    return (await this.custom.replaceNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace,
      plural: PLURAL,
      name,
      body: echo,
    })) as Echo;
  }

  private async apply(echo: Echo, action: Action): Promise<Echo> {
    const { namespace = '', name = '' } = echo.metadata;
    const key = `${namespace}/${name}`;
    switch (action.type) {
      case 'addFinalizer':
        this.log(`${key}: add finalizer`);
        return this.replaceEcho({
          ...echo,
          metadata: { ...echo.metadata, finalizers: [...(echo.metadata.finalizers ?? []), FINALIZER] },
        });
      case 'removeFinalizer':
        this.log(`${key}: deployment gone, remove finalizer`);
        return this.replaceEcho({
          ...echo,
          metadata: { ...echo.metadata, finalizers: (echo.metadata.finalizers ?? []).filter((f) => f !== FINALIZER) },
        });
      case 'createDeployment':
        this.log(`${key}: create deployment (replicas ${action.deployment.spec?.replicas})`);
        await this.apps.createNamespacedDeployment({ namespace, body: action.deployment });
        return echo;
      case 'updateDeployment':
        this.log(`${key}: update deployment (replicas ${action.deployment.spec?.replicas})`);
        await this.apps.replaceNamespacedDeployment({
          namespace,
          name: action.deployment.metadata?.name ?? name,
          body: action.deployment,
        });
        return echo;
      case 'deleteDeployment':
        this.log(`${key}: echo deleted, delete deployment`);
        await orUndefinedOn404(
          this.apps.deleteNamespacedDeployment({ namespace, name: action.name, propagationPolicy: 'Background' }),
        );
        return echo;
      case 'updateStatus':
        this.log(
          `${key}: status replicas ${action.status.replicas}, ready ${action.status.readyReplicas} (generation ` +
            `${action.status.observedGeneration})`,
        );
        return (await this.custom.replaceNamespacedCustomObjectStatus({
          group: GROUP,
          version: VERSION,
          namespace,
          plural: PLURAL,
          name,
          body: { ...echo, status: action.status },
        })) as Echo;
      case 'conflict':
        // Not retried: a person has to rename one of them. The next change to either brings us back.
        this.log(`${key}: ${action.message}`);
        return echo;
    }
  }
}
