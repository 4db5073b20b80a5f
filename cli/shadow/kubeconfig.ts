// `devop exec --shadow`: the local command's Kubernetes client talks to the shadow API proxy (cli/shadow/proxy.ts)
// through a kubeconfig of its own, so it runs beside the real controller and writes nothing; each write it tries is a
// `write` event (the TUI's traffic list, plain lines, NDJSON with the object before and after).
import { chmod, mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { makeSessionDir } from '../process/session-dirs.js';
import type { ChildEnvHook } from '../session/connect.js';
import { startShadowProxy, type ShadowProxy } from './proxy.js';
import { info, warn } from '../reporter.js';

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

export interface ShadowSettings {
  /** --in-cluster: also KUBERNETES_SERVICE_HOST/PORT and the service-account files under DEVOP_ROOT. */
  inCluster: boolean;
}

/** Where in-cluster clients read their service account (client-node: loadFromCluster(DEVOP_ROOT) reads it there). */
export const SERVICE_ACCOUNT_DIR = 'var/run/secrets/kubernetes.io/serviceaccount';

/**
 * Starts the proxy on the session's kubeconfig and gives the local command KUBECONFIG pointing at it. Without
 * --in-cluster the in-cluster variables go: a client that finds KUBERNETES_SERVICE_HOST would use the service-account
 * config and miss the proxy. With it, they name the proxy, and DEVOP_ROOT holds its token, CA and the namespace.
 */
export function shadowChildEnvHook(settings: ShadowSettings): ChildEnvHook {
  return async ({ session, reporter }) => {
    let writes = 0;
    const proxy = await startShadowProxy({
      kc: session.kc,
      onWrite: (write) => reporter.emit({ type: 'write', id: String(++writes), ...write }),
      onWarning: (message) => warn(reporter, message),
    });
    const dir = await makeSessionDir('shadow'); // 0700, removed by a later run if this devop is killed
    const cleanup = async (): Promise<void> => {
      await proxy.close();
      await rm(dir, { recursive: true, force: true });
    };
    const kubeconfig = join(dir, 'kubeconfig');
    try {
      await chmod(dir, 0o700);
      await writeFile(kubeconfig, shadowKubeconfig(proxy, session.namespace), { mode: 0o600 });
    } catch (err) {
      await cleanup();
      throw err;
    }
    // Given the env: the kubeconfig replaces the in-cluster config, or --in-cluster's files name the proxy.
    const apply = async (env: Record<string, string>): Promise<Record<string, string>> => {
      const next: Record<string, string> = { ...env, KUBECONFIG: kubeconfig };
      delete next.KUBERNETES_SERVICE_HOST;
      delete next.KUBERNETES_SERVICE_PORT;
      delete next.KUBERNETES_SERVICE_PORT_HTTPS;
      if (settings.inCluster) {
        // The outgoing hook's DEVOP_ROOT when it made one (remote files), else this session's directory.
        const root = env.DEVOP_ROOT ?? dir;
        const accountDir = join(root, SERVICE_ACCOUNT_DIR);
        await mkdir(accountDir, { recursive: true, mode: 0o700 });
        await writeFile(join(accountDir, 'token'), proxy.token, { mode: 0o600 });
        await writeFile(join(accountDir, 'ca.crt'), proxy.caPem, { mode: 0o600 });
        await writeFile(join(accountDir, 'namespace'), session.namespace, { mode: 0o600 });
        Object.assign(next, {
          DEVOP_ROOT: root,
          KUBERNETES_SERVICE_HOST: '127.0.0.1',
          KUBERNETES_SERVICE_PORT: String(proxy.port),
          KUBERNETES_SERVICE_PORT_HTTPS: String(proxy.port),
        });
      }
      const inCluster = settings.inCluster
        ? `, in-cluster config at ${next.KUBERNETES_SERVICE_HOST}:${next.KUBERNETES_SERVICE_PORT} ` +
          `(service account in $DEVOP_ROOT/${SERVICE_ACCOUNT_DIR})`
        : '';
      info(
        reporter,
        `shadow: the local command's API requests go to ${proxy.url} (KUBECONFIG=${kubeconfig}${inCluster}): ` +
          'reads pass, writes are dry runs, Leases stay in memory',
      );
      return next;
    };
    return { apply, cleanup };
  };
}
