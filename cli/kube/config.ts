// Loads the kubeconfig once (--kubeconfig, KUBECONFIG, ~/.kube/config; --context) and fails clearly when there is none
// — client-node's loadFromDefault would silently fall back to http://localhost:8080.
import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { delimiter, join } from 'node:path';
import { Agent } from 'node:https';
import { KubeConfig } from '@kubernetes/client-node';
import { UserError } from '../../shared/errors.js';
import { boundRequests, DEFAULT_REQUEST_TIMEOUT_MS, parseRequestTimeout } from './request-timeout.js';

export interface KubeAccessOptions {
  kubeconfig?: string;
  context?: string;
  /** How long one API request may take: kubectl's --request-timeout syntax ("10s", "1m", seconds; 0 = no limit). */
  requestTimeout?: string | number;
  /** The environment to read KUBECONFIG / HOME from (tests pass their own). */
  processEnv?: NodeJS.ProcessEnv;
}

export interface LoadedKubeConfig {
  kc: KubeConfig;
  /** The files the config was read from, in order. */
  files: string[];
  context: string;
  /** The namespace of the current context, or "default". */
  namespace: string;
}

/** Which kubeconfig files apply, in the order kubectl reads them. */
export function kubeconfigFiles(options: KubeAccessOptions): { files: string[]; from: string } {
  const env = options.processEnv ?? process.env;
  if (options.kubeconfig) return { files: [options.kubeconfig], from: '--kubeconfig' };
  if (env.KUBECONFIG) return { files: env.KUBECONFIG.split(delimiter).filter(Boolean), from: 'KUBECONFIG' };
  const home = env.HOME || homedir();
  return { files: [join(home, '.kube', 'config')], from: '~/.kube/config' };
}

export function loadKubeConfig(options: KubeAccessOptions): LoadedKubeConfig {
  const timeoutMs =
    options.requestTimeout === undefined ? DEFAULT_REQUEST_TIMEOUT_MS : parseRequestTimeout(options.requestTimeout);
  const { files, from } = kubeconfigFiles(options);
  const present = files.filter((file) => existsSync(file));
  if (present.length === 0) {
    throw new UserError(
      `no kubeconfig found (${from}: ${files.join(delimiter) || '(empty)'})`,
      'point --kubeconfig or KUBECONFIG at a kubeconfig file, or create ~/.kube/config (e.g. with your cloud CLI)',
    );
  }
  const kc = new KubeConfig();
  try {
    kc.loadFromFile(present[0]);
    for (const file of present.slice(1)) {
      const more = new KubeConfig();
      more.loadFromFile(file);
      kc.mergeConfig(more, true);
    }
  } catch (err) {
    throw new UserError(
      `cannot read kubeconfig ${present.join(delimiter)}: ${(err as Error).message}`,
      'fix the file or point --kubeconfig at another one',
      { cause: err },
    );
  }
  if (options.context) {
    if (!kc.getContextObject(options.context)) {
      const known = kc.getContexts().map((c) => c.name);
      throw new UserError(
        `context "${options.context}" is not in the kubeconfig (contexts: ${known.join(', ') || 'none'})`,
        'pass one of the listed contexts to --context',
      );
    }
    kc.setCurrentContext(options.context);
  }
  const context = kc.getCurrentContext();
  const contextObject = context ? kc.getContextObject(context) : null;
  if (!context || !contextObject) {
    const known = kc.getContexts().map((c) => c.name);
    throw new UserError(
      `the kubeconfig (${present.join(delimiter)}) has no current context`,
      known.length > 0
        ? `pass --context (one of: ${known.join(', ')}) or run \`kubectl config use-context NAME\``
        : 'add a context to the kubeconfig, or point --kubeconfig at a working one',
    );
  }
  if (!kc.getCurrentCluster()) {
    throw new UserError(
      `context "${context}" names cluster "${contextObject.cluster}", which is not in the kubeconfig`,
      'fix the context in the kubeconfig or pass another --context',
    );
  }
  reuseConnections(kc);
  boundRequests(kc, timeoutMs);
  return { kc, files: present, context, namespace: contextObject.namespace || 'default' };
}

/**
 * client-node makes a new https.Agent for every API call, so every call pays a full TLS handshake; a session's start-up
 * makes a dozen calls, many in parallel. One keep-alive agent per server and user lets calls share connections and TLS
 * sessions (measured on the stand-in: 50 calls in 100-200 ms instead of 500-640 ms). Idle pooled sockets are unref'd by
 * Node, so they never keep devop alive. Proxied clusters keep client-node's own agents.
 */
export function reuseConnections(kc: KubeConfig): void {
  // createAgent is private in client-node's types; it is the one place where it builds the agent for a request.
  const target = kc as unknown as {
    createAgent(cluster: { server?: string; proxyUrl?: string } | null, options: object): unknown;
  };
  const original = target.createAgent.bind(kc);
  const agents = new Map<string, Agent>();
  target.createAgent = (cluster, options) => {
    if (!cluster?.server?.startsWith('https:') || cluster.proxyUrl) return original(cluster, options);
    const key = `${cluster.server} ${kc.getCurrentUser()?.name ?? ''}`;
    let agent = agents.get(key);
    if (!agent) {
      agent = new Agent({ ...options, keepAlive: true });
      agents.set(key, agent);
    }
    return agent;
  };
}
