// The --shadow child env against the stand-in API server: a kubeconfig that reaches the proxy (and not the in-cluster
// variables), and with --in-cluster, client-node's in-cluster config (loadFromCluster(DEVOP_ROOT)) reaching it too.
import { execFile } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCluster, type ClusterHandle } from '../../standin/index.js';
import { expectStatus } from '../../testkit/api-requests.js';
import type { Reporter, ReportEvent } from '../reporter.js';
import type { Session } from '../session/connect.js';
import { SERVICE_ACCOUNT_DIR, shadowChildEnvHook } from './kubeconfig.js';

const run = promisify(execFile);
const namespace = 'default';

let cluster: ClusterHandle;
let kc: KubeConfig;

beforeAll(async () => {
  cluster = await startCluster({ kubelet: false });
  kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfigPath);
});

afterAll(async () => {
  await cluster?.stop();
});

function collecting(): { reporter: Reporter; events: ReportEvent[] } {
  const events: ReportEvent[] = [];
  return {
    events,
    reporter: { capturesChildOutput: false, emit: (e) => events.push(e), close: async () => undefined },
  };
}

/** A Node program that lists and creates ConfigMaps with client-node, configured as `how` says. */
async function runClient(how: 'kubeconfig' | 'in-cluster', env: Record<string, string>): Promise<string> {
  const load = how === 'kubeconfig' ? 'kc.loadFromDefault();' : 'kc.loadFromCluster(process.env.DEVOP_ROOT);';
  const program = `
    import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
    const kc = new KubeConfig();
    ${load}
    const api = kc.makeApiClient(CoreV1Api);
    const list = await api.listNamespacedConfigMap({ namespace: '${namespace}' });
    const made = await api.createNamespacedConfigMap({
      namespace: '${namespace}',
      body: { metadata: { name: 'by-${how}' } },
    });
    const server = kc.getCurrentCluster().server;
    console.log(JSON.stringify({ listed: list.items.length, made: made.metadata.name, server }));
  `;
  const { stdout } = await run(process.execPath, ['--input-type=module', '-e', program], { env, timeout: 60_000 });
  return stdout;
}

describe('--shadow child env', () => {
  it('gives the command a kubeconfig to the proxy and drops the in-cluster variables', async () => {
    // Given a session and a local env that has in-cluster variables
    const { reporter, events } = collecting();
    const hook = shadowChildEnvHook({ inCluster: false });
    const { apply, cleanup } = await hook({ session: { kc, namespace } as Session, reporter });
    const env = await apply({
      PATH: process.env.PATH ?? '',
      KUBERNETES_SERVICE_HOST: '10.0.0.1',
      KUBERNETES_SERVICE_PORT: '443',
    });
    try {
      // Then the env names the proxy's kubeconfig only
      expect(env.KUBERNETES_SERVICE_HOST).toBeUndefined();
      expect(statSync(env.KUBECONFIG).mode & 0o777).toBe(0o600);
      // And a client that loads it reads from the cluster and its create is a dry run, shown as a write
      const out = JSON.parse(await runClient('kubeconfig', env));
      expect(out.server).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
      expect(out.made).toBe('by-kubeconfig');
      const core = kc.makeApiClient(CoreV1Api);
      expect((await expectStatus(core.readNamespacedConfigMap({ name: 'by-kubeconfig', namespace }))).code).toBe(404);
      expect(events).toContainEqual(
        expect.objectContaining({ type: 'write', verb: 'create', name: 'by-kubeconfig', result: 'dry-run' }),
      );
    } finally {
      await cleanup?.();
    }
    // And the kubeconfig goes with the session
    expect(existsSync(env.KUBECONFIG)).toBe(false);
  });

  it('--in-cluster: KUBERNETES_SERVICE_HOST/PORT and the service account under DEVOP_ROOT name the proxy', async () => {
    const { reporter, events } = collecting();
    const hook = shadowChildEnvHook({ inCluster: true });
    const { apply, cleanup } = await hook({ session: { kc, namespace } as Session, reporter });
    const env = await apply({ PATH: process.env.PATH ?? '' });
    try {
      expect(env.KUBERNETES_SERVICE_HOST).toBe('127.0.0.1');
      expect(existsSync(join(env.DEVOP_ROOT, SERVICE_ACCOUNT_DIR, 'token'))).toBe(true);
      const out = JSON.parse(await runClient('in-cluster', env));
      expect(out.server).toBe(`https://127.0.0.1:${env.KUBERNETES_SERVICE_PORT}`);
      expect(out.made).toBe('by-in-cluster');
      const core = kc.makeApiClient(CoreV1Api);
      expect((await expectStatus(core.readNamespacedConfigMap({ name: 'by-in-cluster', namespace }))).code).toBe(404);
      expect(events).toContainEqual(
        expect.objectContaining({ type: 'write', name: 'by-in-cluster', result: 'dry-run' }),
      );
    } finally {
      await cleanup?.();
    }
  });
});
