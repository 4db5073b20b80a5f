// Which cluster the end-to-end suites run against: the stand-in (default), or a real cluster when DEVOP_TEST_KUBECONFIG
// and DEVOP_TEST_AGENT_IMAGE are set (CI's kind workflow). Tests that need what only the stand-in can make report
// themselves skipped on a real cluster, with the reason, rather than pass unrun.
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { it } from 'vitest';
import { startCluster, type ClusterHandle } from '../standin/index.js';

export interface ExternalTarget {
  kubeconfig: string;
  agentImage: string;
}

export interface TargetCluster {
  /** A kubeconfig whose current context names `namespace`. */
  kubeconfigPath: string;
  /** Where the suite's workloads go: `default` on the stand-in, a fresh namespace per suite on a real cluster. */
  namespace: string;
  /** The stand-in's handle (containerd images, restricted user, node runtime); undefined on a real cluster. */
  standin?: ClusterHandle;
  stop(): Promise<void>;
}

/** The real cluster the environment asks for, or undefined (the stand-in). One variable without the other: an error. */
export function externalTarget(env: NodeJS.ProcessEnv = process.env): ExternalTarget | undefined {
  const kubeconfig = env.DEVOP_TEST_KUBECONFIG ?? '';
  const agentImage = env.DEVOP_TEST_AGENT_IMAGE ?? '';
  if (!kubeconfig && !agentImage) return undefined;
  if (!kubeconfig || !agentImage) {
    throw new Error(
      'DEVOP_TEST_KUBECONFIG and DEVOP_TEST_AGENT_IMAGE go together: set both to run the suites against a real ' +
        'cluster (its kubeconfig, and an agent image its nodes can pull), or neither for the stand-in.',
    );
  }
  if (!existsSync(kubeconfig)) {
    throw new Error(`DEVOP_TEST_KUBECONFIG names ${kubeconfig}, which does not exist: point it at a kubeconfig file`);
  }
  return { kubeconfig, agentImage };
}

/** Env for a devop run: on a real cluster, the agent image DEVOP_TEST_AGENT_IMAGE (the stand-in maps the default). */
export function agentImageEnv(): Record<string, string> {
  const target = externalTarget();
  return target ? { DEVOP_AGENT_IMAGE: target.agentImage } : {};
}

export interface TargetOptions {
  /**
   * An existing namespace to work in instead of a fresh one, for suites whose manifests name theirs (the examples use
   * `default`): stop() then leaves it, and the suite removes what it applied.
   */
  namespace?: string;
}

/**
 * Starts the stand-in, or prepares the real cluster: a namespace of the suite's own (deleted by stop(), with everything
 * in it) and a kubeconfig copy whose current context names it. `suite` names the namespace (lower-case, dashes).
 */
export async function startTargetCluster(suite: string, options: TargetOptions = {}): Promise<TargetCluster> {
  const target = externalTarget();
  if (!target) {
    const standin = await startCluster();
    const { kubeconfigPath, namespace } = standin;
    return { kubeconfigPath, namespace, standin, stop: () => standin.stop() };
  }
  const kc = new KubeConfig();
  kc.loadFromFile(target.kubeconfig);
  const current = kc.getCurrentContext();
  if (!kc.getContextObject(current)) {
    throw new Error(`${target.kubeconfig} has no current context: set one (kubectl config use-context NAME).`);
  }
  // Random suffix: a rerun while the last run's namespace is still terminating must not collide with it.
  const fresh = options.namespace === undefined;
  const slug = suite.toLowerCase().replace(/[^a-z0-9]+/g, '-');
  const namespace = options.namespace ?? `devop-${slug}-${randomBytes(3).toString('hex')}`.slice(0, 63);
  const core = kc.makeApiClient(CoreV1Api);
  if (fresh) {
    await core.createNamespace({ body: { metadata: { name: namespace, labels: { 'devop.dev/test-suite': 'true' } } } });
  }
  const scoped = new KubeConfig();
  scoped.loadFromOptions({
    clusters: kc.clusters,
    users: kc.users,
    contexts: kc.contexts.map((c) => (c.name === current ? { ...c, namespace } : c)),
    currentContext: current,
  });
  const dir = mkdtempSync(join(tmpdir(), 'devop-target-'));
  const kubeconfigPath = join(dir, 'kubeconfig');
  writeFileSync(kubeconfigPath, scoped.exportConfig(), { mode: 0o600 });
  let stopped: Promise<void> | undefined;
  const stop = async () => {
    try {
      // Background: the namespace's pods end on their own time; the next suite has a namespace of its own.
      if (fresh) await core.deleteNamespace({ name: namespace, propagationPolicy: 'Background' });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  };
  return { kubeconfigPath, namespace, stop: () => (stopped ??= stop()) };
}

type TestBody = () => Promise<void> | void;

/**
 * `it` for a test that needs what only the stand-in can make (images built into its containerd, restricted user, node
 * processes, …): on a real cluster the test is reported skipped, its name carrying the reason, and a console line says
 * so.
 */
export function standinOnly(reason: string): (name: string, body: TestBody, timeoutMs?: number) => void {
  const target = externalTarget();
  if (!target) return (name, body, timeoutMs) => it(name, body, timeoutMs);
  return (name, body, timeoutMs) => {
    console.warn(`SKIPPED on the cluster of ${target.kubeconfig}: ${name} (stand-in only: ${reason})`);
    it.skip(`${name} [stand-in only: ${reason}]`, body, timeoutMs);
  };
}
