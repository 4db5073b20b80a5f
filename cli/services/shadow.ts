// `devop exec --shadow`: the local command's Kubernetes client talks to the shadow API proxy (cli/kube/shadow-proxy.ts)
// through a kubeconfig of its own, so it runs beside the real controller and writes nothing; each write it tries is a
// `write` event (the TUI's traffic list, plain lines, NDJSON with the object before and after).
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import type { ChildEnvHook } from '../session/connect.js';
import { startShadowProxy, type ShadowProxy } from '../kube/shadow-proxy.js';

/** The context, cluster and user name in the kubeconfig the local command gets. */
const SHADOW_CONTEXT = 'devop-shadow';

/** A kubeconfig that points at the proxy, with its token, in the session's namespace. */
export function shadowKubeconfig(proxy: Pick<ShadowProxy, 'url' | 'token' | 'caPem'>, namespace: string): string {
  return stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [
      {
        name: SHADOW_CONTEXT,
        cluster: {
          server: proxy.url,
          'certificate-authority-data': Buffer.from(proxy.caPem).toString('base64'),
        },
      },
    ],
    users: [{ name: SHADOW_CONTEXT, user: { token: proxy.token } }],
    contexts: [{ name: SHADOW_CONTEXT, context: { cluster: SHADOW_CONTEXT, user: SHADOW_CONTEXT, namespace } }],
    'current-context': SHADOW_CONTEXT,
  });
}

/**
 * Starts the proxy on the session's kubeconfig and gives the local command KUBECONFIG pointing at it. The in-cluster
 * variables go: a client that finds KUBERNETES_SERVICE_HOST would use the service-account config instead.
 */
export function shadowChildEnvHook(): ChildEnvHook {
  return async (env, { session, reporter }) => {
    let writes = 0;
    const proxy = await startShadowProxy({
      kc: session.kc,
      onWrite: (write) => reporter.emit({ type: 'write', id: String(++writes), ...write }),
      onWarning: (message) => reporter.emit({ type: 'log', level: 'warn', message }),
    });
    const dir = await mkdtemp(join(tmpdir(), 'devop-shadow-'));
    const kubeconfig = join(dir, 'kubeconfig');
    try {
      await chmod(dir, 0o700);
      await writeFile(kubeconfig, shadowKubeconfig(proxy, session.namespace), { mode: 0o600 });
    } catch (err) {
      await proxy.close();
      await rm(dir, { recursive: true, force: true });
      throw err;
    }
    reporter.emit({
      type: 'log',
      level: 'info',
      message:
        `shadow: the local command's API requests go to ${proxy.url} (KUBECONFIG=${kubeconfig}): reads pass, ` +
        'writes are dry runs, Leases stay in memory',
    });
    const next: Record<string, string> = { ...env, KUBECONFIG: kubeconfig };
    delete next.KUBERNETES_SERVICE_HOST;
    delete next.KUBERNETES_SERVICE_PORT;
    return {
      env: next,
      cleanup: async () => {
        await proxy.close();
        await rm(dir, { recursive: true, force: true });
      },
    };
  };
}
