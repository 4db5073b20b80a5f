// The outgoing side of one session, as `devop exec` uses it: start the local proxy over the session's dialer, fetch the
// remote files, and say which env the local command gets; close() undoes all of it.
import { UserError } from '../../shared/errors.js';
import { info, type Reporter, warn } from '../reporter.js';
import { withLocalNames, type ClusterDialer } from './dialer.js';
import { DEVOP_ROOT_ENV, outgoingEnv, outgoingShimPath, preloadBundlePath } from './env.js';
import { FilterSyntaxError, parseOutgoingRule } from './filters.js';
import type { ProxyDialEvent } from './http-connect.js';
import type { ProxyRefusal } from './proxy-auth.js';
import { netnsLauncherPath, startNetnsBridge, type NetnsBridge } from './netns.js';
import { startOutgoingProxy, type OutgoingProxy } from './proxy.js';
import { fetchRemoteFiles, type RemoteFiles } from './remote-files.js';

export interface OutgoingOptions {
  dialer: ClusterDialer;
  /** Route the local command's connections through the cluster at all (devop.json outgoing.enabled). */
  enabled?: boolean;
  /** Set HTTP(S)_PROXY / ALL_PROXY / NO_PROXY (outgoing.proxy). */
  proxyEnv?: boolean;
  /** Add the Node preload to NODE_OPTIONS (outgoing.nodePreload). */
  nodePreload?: boolean;
  /** Add the shim for dynamically linked programs to LD_PRELOAD (outgoing.nativePreload). */
  nativePreload?: boolean;
  /** Run the command in a network namespace of its own whose TCP and DNS reach devop (outgoing.netns, Linux). */
  netns?: boolean;
  include?: readonly string[];
  exclude?: readonly string[];
  /** Destinations that must stay local whatever the user says, e.g. the kube API server of the local kubeconfig. */
  alwaysLocal?: readonly string[];
  /** Resolve names with this machine's DNS instead of the pod's (devop.json dns.enabled = false). */
  localNames?: boolean;
  /** Absolute paths in the target container (--remote-file, remoteFiles). */
  remoteFiles?: readonly string[];
  reporter?: Reporter;
}

export interface OutgoingSession {
  /** The local proxy (undefined when outgoing is disabled). */
  proxy?: OutgoingProxy;
  remoteFiles?: RemoteFiles;
  /**
   * What the command is started under with `--outgoing-netns` (dist/devop-netns, given the local ports devop steals or
   * mirrors to, which it makes reachable from this machine); the command follows it.
   */
  launcher?: (localPorts: readonly number[]) => string[];
  /** The variables to add to the child's env (given the env built so far, for NODE_OPTIONS). */
  env(childEnv: Readonly<Record<string, string>>): Record<string, string>;
  /** Stops the proxy and removes DEVOP_ROOT. Safe to call twice. */
  close(): Promise<void>;
}

/**
 * The exclude rule for the kube API server of a kubeconfig cluster URL (so a local kube client talks to it directly).
 */
export function apiServerRule(serverUrl: string | undefined): string | undefined {
  if (!serverUrl) return undefined;
  try {
    const host = new URL(serverUrl).hostname.replace(/^\[|\]$/g, '');
    return host || undefined;
  } catch {
    return undefined;
  }
}

function checkRules(flag: string, rules: readonly string[]): void {
  for (const rule of rules) {
    try {
      parseOutgoingRule(rule);
    } catch (err) {
      if (err instanceof FilterSyntaxError) {
        throw new UserError(
          `${flag}: ${err.message}`,
          'use HOST, *.DOMAIN, IP, CIDR (10.0.0.0/8), each optionally with :PORT or :LOW-HIGH, or :PORT alone',
        );
      }
      throw err;
    }
  }
}

function isPowerOfTen(n: number): boolean {
  return /^10*$/.test(String(n));
}

/** The LD_PRELOAD shim, or undefined with one line saying why dynamically linked programs go without it. */
function usableShimPath(reporter: Reporter | undefined): string | undefined {
  if (process.platform !== 'linux') return undefined;
  const path = outgoingShimPath();
  if (!path) {
    if (reporter) {
      warn(
        reporter,
        'dist/devop-outgoing.so is missing (run `npm run build` where a C compiler, cc, is installed): ' +
          'programs other than Node reach the cluster only through the proxy env',
      );
    }
    return undefined;
  }
  // ld.so splits LD_PRELOAD at spaces and colons: such a path cannot be said there.
  if (/[\s:]/.test(path)) {
    if (reporter) {
      warn(
        reporter,
        `the outgoing shim's path has a space or a colon, which LD_PRELOAD cannot hold (${path}): ` +
          'install devop under another directory; programs other than Node get the proxy env only',
      );
    }
    return undefined;
  }
  return path;
}

/** dist/devop-netns, or a UserError naming why `--outgoing-netns` cannot be had here. */
function usableLauncherPath(): string {
  if (process.platform !== 'linux') {
    throw new UserError(
      `--outgoing-netns needs Linux network namespaces (this is ${process.platform})`,
      'drop --outgoing-netns (devop.json outgoing.netns): programs here reach the cluster through the proxy env',
    );
  }
  const path = netnsLauncherPath();
  if (!path) {
    throw new UserError(
      'dist/devop-netns is missing, so --outgoing-netns cannot start the command',
      'run `npm run build` where a C compiler (cc) is installed, or drop --outgoing-netns',
    );
  }
  return path;
}

export async function startOutgoing(options: OutgoingOptions): Promise<OutgoingSession> {
  const include = [...(options.include ?? [])];
  const exclude = [...(options.exclude ?? []), ...(options.alwaysLocal ?? [])];
  checkRules('--outgoing-include', include);
  checkRules('--outgoing-exclude', exclude);
  const enabled = options.enabled ?? true;
  const reporter = options.reporter;
  // Before anything starts: a namespace that cannot be had here is one line, not a half-started session.
  const launcherPath = enabled && options.netns ? usableLauncherPath() : undefined;
  if (options.netns && !enabled && reporter) {
    warn(
      reporter,
      '--outgoing-netns does nothing while outgoing is off (--no-outgoing, or an agent without outgoing ' +
        "connections): the command runs in this machine's network — fix: drop --no-outgoing, or --outgoing-netns",
    );
  }

  const dialer = options.localNames ? withLocalNames(options.dialer) : options.dialer;
  const proxyOptions = {
    onDial: (event: ProxyDialEvent) =>
      reporter?.emit({
        type: 'log',
        level: event.error ? 'info' : 'debug',
        message: event.error
          ? `outgoing ${event.host}:${event.port} (${event.via}) failed: ${event.error.message}`
          : `outgoing ${event.host}:${event.port} (${event.via}) through the pod`,
      }),
    onRefused: ({ via, reason, count }: ProxyRefusal & { count: number }) =>
      reporter?.emit({
        type: 'log',
        // The first refusal and every tenfold after it are warnings; a scan in between does not flood the log.
        level: isPowerOfTen(count) ? 'warn' : 'debug',
        message:
          `the outgoing proxy refused a connection without the session's secret (${via}: ${reason}; ${count} ` +
          'so far): another program or user of this machine tried to use it; the local command gets the secret ' +
          'in its env (HTTP_PROXY, ALL_PROXY, DEVOP_PRELOAD_CONFIG)',
      }),
  };
  const proxy = enabled ? await startOutgoingProxy({ dialer, ...proxyOptions }) : undefined;
  let remoteFiles: RemoteFiles | undefined;
  try {
    if (options.remoteFiles && options.remoteFiles.length > 0) {
      remoteFiles = await fetchRemoteFiles(options.dialer, options.remoteFiles);
      if (reporter) info(reporter, `remote files in DEVOP_ROOT=${remoteFiles.root}: ${remoteFiles.paths.join(', ')}`);
    }
  } catch (err) {
    await proxy?.close();
    throw err;
  }

  const preloadPath = options.nodePreload === false ? undefined : preloadBundlePath();
  if (proxy && options.nodePreload !== false && !preloadPath && reporter) {
    warn(reporter, 'dist/preload.js is missing (run `npm run build`): Node programs get the proxy env only');
  }
  // In the namespace every program's TCP and DNS reach devop already; the shim's UDP relays listen on this machine's
  // loopback, out of the namespace's reach, and the shim must not load into devop-netns's own forwarder.
  const shimPath = proxy && options.nativePreload !== false && !launcherPath ? usableShimPath(reporter) : undefined;
  let netns: NetnsBridge | undefined;
  let launcher: ((localPorts: readonly number[]) => string[]) | undefined;
  if (proxy && launcherPath) {
    launcher = (localPorts) => [launcherPath, ...localPorts.flatMap((port) => ['--publish', String(port)]), '--'];
    let refusals = 0;
    try {
      netns = await startNetnsBridge({
        dialer,
        secret: proxy.credentials.secret,
        include,
        exclude,
        onDial: proxyOptions.onDial,
        onRefused: (refusal) => proxyOptions.onRefused({ ...refusal, count: ++refusals }),
      });
    } catch (err) {
      await Promise.all([proxy.close(), remoteFiles?.remove()]);
      throw err;
    }
  }
  let closed = false;
  return {
    proxy,
    remoteFiles,
    launcher,
    env(childEnv) {
      const vars = proxy
        ? outgoingEnv(childEnv, {
            proxy: { host: proxy.host, port: proxy.port },
            credentials: proxy.credentials,
            include,
            exclude,
            preloadPath,
            shimPath,
            root: remoteFiles?.root,
          })
        : remoteFiles
          ? { [DEVOP_ROOT_ENV]: remoteFiles.root }
          : {};
      if (proxy && options.proxyEnv === false) {
        for (const key of [
          'HTTP_PROXY',
          'http_proxy',
          'HTTPS_PROXY',
          'https_proxy',
          'ALL_PROXY',
          'all_proxy',
          'NO_PROXY',
          'no_proxy',
        ]) {
          delete vars[key];
        }
      }
      if (netns) Object.assign(vars, netns.env);
      return vars;
    },
    async close() {
      if (closed) return;
      closed = true;
      await Promise.all([proxy?.close(), remoteFiles?.remove(), netns?.close()]);
    },
  };
}
