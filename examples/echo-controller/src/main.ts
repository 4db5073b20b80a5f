// echo-controller entry: `main.ts [--namespace NS] [--image IMAGE] [--leader-elect] [--webhook-port PORT]
// [--max-replicas N]` reconciles Echo resources and, with a webhook port, serves the Echo validating webhook.
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { parseArgs } from 'node:util';
import { KubeConfig } from '@kubernetes/client-node';
import { EchoController } from './controller.js';
import { DEFAULT_ECHO_IMAGE } from './echo.js';
import { becomeLeader } from './leader.js';
import { DEFAULT_MAX_REPLICAS, startWebhookServer } from './webhook.js';
import { webhookTls } from './webhook-tls.js';

/** The names manifests/webhook.yaml gives the webhook's Service, Secret and ValidatingWebhookConfiguration. */
const WEBHOOK = {
  service: 'echo-controller-webhook',
  secret: 'echo-controller-webhook-tls',
  configuration: 'echo-controller',
};

/** In a pod: its service account; elsewhere (e.g. under devop exec): the local kubeconfig. */
function loadKubeConfig(): KubeConfig {
  const kc = new KubeConfig();
  if (process.env.KUBERNETES_SERVICE_HOST) {
    kc.loadFromCluster();
    return kc;
  }
  try {
    kc.loadFromDefault();
  } catch (err) {
    throw new Error(
      `echo-controller: cannot load the kubeconfig (${err instanceof Error ? err.message : String(err)}). Fix: point ` +
        `KUBECONFIG at a readable kubeconfig.`,
    );
  }
  if (!kc.getCurrentContext() || !kc.getCurrentCluster()) {
    throw new Error(
      'echo-controller: no Kubernetes context found. Fix: set KUBECONFIG or run in a pod with a service account.',
    );
  }
  return kc;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      namespace: { type: 'string' },
      image: { type: 'string' },
      'leader-elect': { type: 'boolean', default: false },
      'lease-namespace': { type: 'string' },
      'webhook-port': { type: 'string' },
      'max-replicas': { type: 'string' },
    },
  });
  const log = (line: string): void => void process.stdout.write(`${new Date().toISOString()} ${line}\n`);
  const kubeConfig = loadKubeConfig();
  const namespace = values.namespace ?? process.env.WATCH_NAMESPACE;
  const shutdown = new AbortController();
  process.on('SIGTERM', () => shutdown.abort());
  process.on('SIGINT', () => shutdown.abort());

  // Every replica serves the webhook, leader or not: kube-apiserver calls any pod behind the Service.
  const webhookPort = values['webhook-port'] ?? process.env.WEBHOOK_PORT;
  if (webhookPort) {
    const maxReplicas = Number(values['max-replicas'] ?? process.env.ECHO_MAX_REPLICAS ?? DEFAULT_MAX_REPLICAS);
    if (!Number.isInteger(maxReplicas) || maxReplicas < 0)
      throw new Error(`echo-controller: --max-replicas must be a whole number ≥ 0, got "${values['max-replicas']}"`);
    const tls = await webhookTls({ kubeConfig, namespace: process.env.POD_NAMESPACE ?? 'default', ...WEBHOOK });
    const server = await startWebhookServer({ port: Number(webhookPort), tls, maxReplicas, log });
    shutdown.signal.addEventListener('abort', () => server.close(), { once: true });
  }

  const leadership = values['leader-elect']
    ? await becomeLeader({
        kubeConfig,
        namespace: values['lease-namespace'] ?? process.env.POD_NAMESPACE ?? namespace ?? 'default',
        name: 'echo-controller',
        // In a pod HOSTNAME is the pod's name; the suffix keeps two processes on one machine apart (as client-go does).
        identity: `${process.env.HOSTNAME ?? hostname()}_${randomUUID().slice(0, 8)}`,
        signal: shutdown.signal,
        log,
      }).catch((err: unknown) => {
        if (shutdown.signal.aborted) return undefined;
        throw err;
      })
    : undefined;
  if (shutdown.signal.aborted) return;

  const controller = new EchoController({
    kubeConfig,
    namespace,
    image: values.image ?? process.env.ECHO_IMAGE ?? DEFAULT_ECHO_IMAGE,
    log,
  });
  shutdown.signal.addEventListener('abort', () => controller.stop(), { once: true });
  void leadership?.lost.then(() => {
    if (!shutdown.signal.aborted) {
      log('lost leadership: stopping');
      process.exitCode = 1;
      shutdown.abort();
    }
  });
  log(`echo-controller watching echoes in ${namespace ?? 'all namespaces'}`);
  await controller.run();
  await leadership?.release();
}

main().then(
  () => process.exit(process.exitCode ?? 0),
  (err: unknown) => {
    process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  },
);
