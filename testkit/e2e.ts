// End-to-end harness: a stand-in cluster (or the real one of DEVOP_TEST_KUBECONFIG: testkit/target-cluster.ts),
// helpers to deploy the echo workload, run the built `devop` CLI as a child process and watch its output, and send HTTP
// requests to pod IPs (on the stand-in's bridge, reachable from the host; from a client pod on either cluster).
import { spawn, type ChildProcess } from 'node:child_process';
import { join, resolve } from 'node:path';
import { readFileSync } from 'node:fs';
import { AppsV1Api, CoreV1Api, KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { startCluster } from '../standin/index.js';
import { exitAfterOutput } from './exit-after-output.js';
import { agentImageEnv, startTargetCluster, type TargetCluster } from './target-cluster.js';
import { pidsOfContainer } from './pods.js';
import { WAIT_MS, waitFor } from './wait.js';
import { httpGet, type Answer } from './http.js';

export type Cluster = Awaited<ReturnType<typeof startCluster>>;

export const ROOT = resolve(import.meta.dirname, '..');
export const LOCAL_SERVER = join(ROOT, 'testkit', 'fixtures', 'local-server.mjs');

export async function startE2ECluster(): Promise<{
  cluster: Cluster;
  kc: KubeConfig;
  core: CoreV1Api;
  apps: AppsV1Api;
}> {
  const cluster = await startCluster();
  const kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfigPath);
  return { cluster, kc, core: kc.makeApiClient(CoreV1Api), apps: kc.makeApiClient(AppsV1Api) };
}

export interface E2ETarget {
  cluster: TargetCluster;
  /** The suite's namespace (the kubeconfig's): `default` on the stand-in, one per suite on a real cluster. */
  namespace: string;
  kc: KubeConfig;
  core: CoreV1Api;
  apps: AppsV1Api;
}

/** The stand-in, or the real cluster of DEVOP_TEST_KUBECONFIG; `suite` names the suite's namespace there. */
export async function startE2ETarget(suite: string): Promise<E2ETarget> {
  const cluster = await startTargetCluster(suite);
  const kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfigPath);
  const [core, apps] = [kc.makeApiClient(CoreV1Api), kc.makeApiClient(AppsV1Api)];
  return { cluster, namespace: cluster.namespace, kc, core, apps };
}

export interface EchoDeployment {
  name: string;
  pod: V1Pod;
  podName: string;
  podIP: string;
}

/**
 * A Deployment of devop.test/http-echo on port 8080, with a ConfigMap-backed env var (and `extraEnv`, e.g. LISTEN_HOST
 * `::` for both families); waits for a Ready pod.
 */
export async function deployEcho(
  env: { core: CoreV1Api; apps: AppsV1Api; namespace?: string },
  name: string,
  namespace = env.namespace ?? 'default',
  extraEnv: { name: string; value: string }[] = [],
): Promise<EchoDeployment> {
  await env.core.createNamespacedConfigMap({
    namespace,
    body: { metadata: { name: `${name}-config` }, data: { GREETING: `hello from ${name}'s configmap` } },
  });
  await env.apps.createNamespacedDeployment({
    namespace,
    body: {
      metadata: { name },
      spec: {
        replicas: 1,
        selector: { matchLabels: { app: name } },
        template: {
          metadata: { labels: { app: name } },
          spec: {
            containers: [
              {
                name: 'echo',
                image: 'devop.test/http-echo',
                ports: [{ containerPort: 8080 }],
                env: [
                  { name: 'PORT', value: '8080' },
                  { name: 'APP_MODE', value: 'production' },
                  { name: 'SECRET_TOKEN', value: 'do-not-leak' },
                  { name: 'GREETING', valueFrom: { configMapKeyRef: { name: `${name}-config`, key: 'GREETING' } } },
                  ...extraEnv,
                ],
                readinessProbe: { tcpSocket: { port: 8080 }, periodSeconds: 1 },
              },
            ],
          },
        },
      },
    },
  });
  const pod = await waitFor(`a Ready pod of deployment ${name}`, async () => {
    const list = await env.core.listNamespacedPod({ namespace, labelSelector: `app=${name}` });
    return list.items.find(
      (p) => p.status?.podIP && (p.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True'),
    );
  });
  return { name, pod, podName: pod.metadata?.name ?? '', podIP: pod.status?.podIP ?? '' };
}

/** The status and body of an HTTP answer. */
export type HttpAnswer = Pick<Answer, 'status' | 'body'>;

/** Who answers a request from the host (the node: never stolen unless --steal-probes). */
export async function whoAnswers(
  host: string,
  port: number,
  path = '/',
  headers: Record<string, string> = {},
): Promise<string> {
  // A fresh connection closed after the answer, 5 s at most: the node's probes are quick or the pod is not serving.
  return whoAnswered(
    await httpGet({ host, port }, path, { headers: { connection: 'close', ...headers }, timeoutMs: 5000 }),
  );
}

export class DevopRun {
  readonly child: ChildProcess;
  stdout = '';
  stderr = '';
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** devop has exited and all its output is read. */
  private over = false;

  constructor(args: string[], options: { env?: NodeJS.ProcessEnv; cwd?: string } = {}) {
    this.child = spawn(process.execPath, [join(ROOT, 'bin', 'devop.js'), ...args], {
      cwd: options.cwd ?? ROOT,
      env: { ...process.env, CI: '1', ...agentImageEnv(), ...options.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.child.stdout?.setEncoding('utf8').on('data', (t: string) => (this.stdout += t));
    this.child.stderr?.setEncoding('utf8').on('data', (t: string) => (this.stderr += t));
    this.exited = exitAfterOutput(this.child);
    void this.exited.then(() => (this.over = true));
  }

  get output(): string {
    return `--- stdout ---\n${this.stdout}\n--- stderr ---\n${this.stderr}`;
  }

  /** Waits for `pattern` on stderr; fails at once (with the output) if devop exits first. */
  waitForStderr(pattern: RegExp, timeoutMs = WAIT_MS): Promise<RegExpMatchArray> {
    return this.waitForText('stderr', pattern, timeoutMs);
  }

  /** Waits for `pattern` on stdout (`--output json`'s events); fails at once if devop exits first. */
  waitForStdout(pattern: RegExp, timeoutMs = WAIT_MS): Promise<RegExpMatchArray> {
    return this.waitForText('stdout', pattern, timeoutMs);
  }

  private async waitForText(
    stream: 'stdout' | 'stderr',
    pattern: RegExp,
    timeoutMs: number,
  ): Promise<RegExpMatchArray> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const m = this[stream].match(pattern);
      if (m) return m;
      if (this.over)
        throw new Error(
          `devop exited (${this.child.exitCode ?? this.child.signalCode}) before printing ${pattern} on ${stream}\n` +
            this.output,
        );
      if (Date.now() >= deadline)
        throw new Error(`devop did not print ${pattern} on ${stream} within ${timeoutMs} ms\n${this.output}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** Waits for "devop: ready"; fails early (with all of its output) if devop exits first. */
  async ready(timeoutMs = WAIT_MS): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (/^devop: ready$/m.test(this.stderr)) return;
      if (this.over)
        throw new Error(
          `devop exited with ${this.child.exitCode ?? this.child.signalCode} before ready\n${this.output}`,
        );
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`devop not ready within ${timeoutMs} ms\n${this.output}`);
  }

  async stop(signal: NodeJS.Signals = 'SIGTERM'): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill(signal);
    return this.exited;
  }

  /** For afterAll: SIGTERM (devop stops its local command), SIGKILL after a grace, and no orphaned local server. */
  async dispose(graceMs = 5000): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) {
      this.child.kill('SIGTERM');
      const timer = setTimeout(() => this.child.kill('SIGKILL'), graceMs);
      await this.exited;
      clearTimeout(timer);
    }
    killLocalServer(this);
  }
}

/** `devop exec` against the cluster with plain output. */
export function devopExec(
  cluster: { kubeconfigPath: string },
  execArgs: string[],
  command: string[],
  options: { env?: NodeJS.ProcessEnv; kubeconfig?: string } = {},
): DevopRun {
  return new DevopRun(
    [
      'exec',
      '--kubeconfig',
      options.kubeconfig ?? cluster.kubeconfigPath,
      '--output',
      'plain',
      ...execArgs,
      '--',
      ...command,
    ],
    { env: options.env },
  );
}

/** The local test server as the local command (it listens on $LOCAL_PORT). */
export const LOCAL_SERVER_COMMAND: readonly string[] = [process.execPath, LOCAL_SERVER];

/** Requests the local server saw (from its stdout lines). */
export function seenRequests(run: DevopRun): { method: string; path: string; headers: Record<string, string> }[] {
  return run.stdout
    .split('\n')
    .filter((l) => l.startsWith('{"seen":'))
    .map((l) => JSON.parse(l) as { seen: string; method: string; path: string; headers: Record<string, string> })
    .filter((e) => e.seen === 'request');
}

/** Kills the local server a devop run started (after a kill -9 of devop it is left as an orphan). */
export function killLocalServer(run: DevopRun): void {
  for (const line of run.stdout.split('\n')) {
    if (!line.startsWith('{"seen":"listening"')) continue;
    const e = JSON.parse(line) as { seen: string; pid?: number };
    if (e.pid) {
      try {
        process.kill(e.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  }
}

/**
 * A client inside the cluster: connections from the host come from the node's IP, which the agent treats as kubelet
 * probes and never steals (unless --steal-probes); real traffic comes from other pods. This pod runs `sleep`; requests
 * are made by one long-lived Node process run in its network namespace, each on a new connection: on the stand-in by
 * nsenter into the container's process (found through the cgroup the stand-in names after the container ID), on a real
 * cluster by `kubectl exec` (the shell image has Node).
 */
export interface PodClient {
  get(
    host: string,
    port: number,
    path: string,
    headers?: Record<string, string>,
    timeoutMs?: number,
  ): Promise<HttpAnswer>;
  /** A GET on the client's one keep-alive connection (a new one when the other side closed it); `reused` says which. */
  keepAliveGet(host: string, port: number, path: string, timeoutMs?: number): Promise<HttpAnswer & { reused: boolean }>;
  who(host: string, port: number, path?: string, headers?: Record<string, string>): Promise<string>;
  /** Who answers a POST of `body` (with its headers, e.g. its content-type). */
  whoAnswersPost(
    host: string,
    port: number,
    path: string,
    body: string,
    headers: Record<string, string>,
  ): Promise<string>;
  close(): void;
}

export async function startPodClient(
  env: { cluster: Cluster | TargetCluster; core: CoreV1Api; namespace?: string },
  name = 'client',
  namespace = env.namespace ?? 'default',
): Promise<PodClient> {
  await env.core.createNamespacedPod({
    namespace,
    body: {
      metadata: { name },
      spec: { containers: [{ name: 'client', image: 'devop.test/shell', command: ['sh', '-c', 'exec sleep 100000'] }] },
    },
  });
  const containerId = await waitFor(`client pod ${name} to run`, async () => {
    const pod = await env.core.readNamespacedPod({ name, namespace });
    const status = pod.status?.containerStatuses?.[0];
    return status?.state?.running && status.containerID ? status.containerID.replace(/^[a-z]+:\/\//, '') : undefined;
  });
  const script = join(ROOT, 'testkit', 'fixtures', 'pod-http-client.mjs');
  const standin = 'instance' in env.cluster ? env.cluster : env.cluster.standin;
  const stdio: ['pipe', 'pipe', 'inherit'] = ['pipe', 'pipe', 'inherit'];
  let child: ChildProcess;
  if (standin) {
    // The container's processes, found as the devop agent finds them (their /proc/<pid>/cgroup names the container ID).
    const pid = await waitFor(`the client pod's process`, async () => (await pidsOfContainer(containerId))[0]);
    child = spawn('nsenter', ['-t', String(pid), '-n', process.execPath, script], { stdio });
  } else {
    // The same line protocol over kubectl exec's stdin and stdout.
    const kubectl = process.env.DEVOP_TEST_KUBECTL ?? 'kubectl';
    const inPod = ['node', '--input-type=module', '-e', readFileSync(script, 'utf8')];
    const exec = ['--kubeconfig', env.cluster.kubeconfigPath, 'exec', '-i', '-n', namespace, name, '--'];
    child = spawn(kubectl, [...exec, ...inPod], { stdio });
  }
  const pending = new Map<number, (r: { status?: number; body?: string; error?: string; reused?: boolean }) => void>();
  let buffered = '';
  child.stdout?.setEncoding('utf8').on('data', (text: string) => {
    buffered += text;
    for (let i = buffered.indexOf('\n'); i >= 0; i = buffered.indexOf('\n')) {
      const line = buffered.slice(0, i);
      buffered = buffered.slice(i + 1);
      const result = JSON.parse(line) as {
        id: number;
        status?: number;
        body?: string;
        error?: string;
        reused?: boolean;
      };
      pending.get(result.id)?.(result);
      pending.delete(result.id);
    }
  });
  let nextId = 0;
  const send = (
    host: string,
    port: number,
    path: string,
    headers: Record<string, string> = {},
    timeoutMs = 5000,
    post?: { body: string },
  ): Promise<HttpAnswer> =>
    new Promise((resolvePromise, reject) => {
      const id = ++nextId;
      const method = post ? 'POST' : 'GET';
      pending.set(id, (r) =>
        r.error !== undefined
          ? reject(new Error(`${method} ${host}:${port}${path} from pod ${name}: ${r.error}`))
          : resolvePromise({ status: r.status ?? 0, body: r.body ?? '' }),
      );
      child.stdin?.write(`${JSON.stringify({ id, host, port, path, headers, timeoutMs, method, body: post?.body })}\n`);
    });
  const get = (host: string, port: number, path: string, headers?: Record<string, string>, timeoutMs?: number) =>
    send(host, port, path, headers, timeoutMs);
  const keepAliveGet = (
    host: string,
    port: number,
    path: string,
    timeoutMs = 5000,
  ): Promise<HttpAnswer & { reused: boolean }> =>
    new Promise((resolvePromise, reject) => {
      const id = ++nextId;
      pending.set(id, (r) =>
        r.error !== undefined
          ? reject(new Error(`GET ${host}:${port}${path} (keep-alive) from pod ${name}: ${r.error}`))
          : resolvePromise({ status: r.status ?? 0, body: r.body ?? '', reused: Boolean(r.reused) }),
      );
      child.stdin?.write(`${JSON.stringify({ id, host, port, path, timeoutMs, keepAlive: true })}\n`);
    });
  return {
    get,
    keepAliveGet,
    async who(host, port, path = '/', headers = {}) {
      return whoAnswered(await get(host, port, path, headers));
    },
    async whoAnswersPost(host, port, path, body, headers) {
      return whoAnswered(await send(host, port, path, headers, 5000, { body }));
    },
    close() {
      child.stdin?.end();
      child.kill();
    },
  };
}

/** The first process of a stand-in pod's container (the stand-in names its cgroup after the container ID). */
/** "local" (the local test server), or the pod name http-echo put in its JSON answer. */
export function whoAnswered(answer: HttpAnswer): string {
  if (answer.body.startsWith('local ')) return 'local';
  try {
    return String((JSON.parse(answer.body) as { pod: string }).pod);
  } catch {
    return `unexpected: ${answer.status} ${answer.body.slice(0, 100)}`;
  }
}
