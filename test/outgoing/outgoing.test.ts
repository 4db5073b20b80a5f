// Outgoing traffic, cluster DNS and remote files end to end on the stand-in: a local curl (proxy env) and a local Node
// program (plain fetch, preload) reach a ClusterIP service by name from the target pod; excludes stay local; unknown
// names are ENOTFOUND; --remote-file copies a pod-only file under DEVOP_ROOT; devop port-forward serves byte-exact.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { request } from 'node:http';
import { connect } from 'node:net';
import { join } from 'node:path';
import type { AppsV1Api, CoreV1Api } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireRoot } from '../../testkit/root.js';
import {
  DevopRun,
  ROOT,
  deployEcho,
  devopExec,
  startE2ECluster,
  type Cluster,
  type EchoDeployment,
} from '../../testkit/e2e.js';
import { waitFor } from '../../testkit/wait.js';

requireRoot('outgoing (proxy env, Node preload, remote files, port-forward)');

const FETCH_CLIENT = join(ROOT, 'test', 'outgoing', 'fixtures', 'fetch-client.mjs');
/** A devop run (agent start-up included) on a loaded machine; below TEST_TIMEOUT_MS so that its output is shown. */
const RUN_DEADLINE_MS = 120_000;
const TEST_TIMEOUT_MS = 180_000;
/** The port the issue names for `devop port-forward -L 18080:echo.default:80`. */
const FORWARD_PORT = 18080;

interface EchoAnswer {
  pod: string;
  path: string;
  body: string;
  remoteAddress: string;
  headers: Record<string, string>;
}

/** A Deployment of http-echo that declares no ports: the "workload" the local command runs as (nothing to steal). */
async function deployClient(
  env: { core: CoreV1Api; apps: AppsV1Api },
  name: string,
): Promise<{ podName: string; podIP: string; containerID: string }> {
  await env.apps.createNamespacedDeployment({
    namespace: 'default',
    body: {
      metadata: { name },
      spec: {
        replicas: 1,
        selector: { matchLabels: { app: name } },
        template: {
          metadata: { labels: { app: name } },
          spec: {
            containers: [{ name: 'app', image: 'devop.test/http-echo', env: [{ name: 'PORT', value: '8080' }] }],
          },
        },
      },
    },
  });
  const pod = await waitFor(`a running pod of ${name}`, async () => {
    const list = await env.core.listNamespacedPod({ namespace: 'default', labelSelector: `app=${name}` });
    return list.items.find(
      (p) => p.status?.podIP && p.status.phase === 'Running' && p.status.containerStatuses?.[0]?.containerID,
    );
  });
  const containerID = (pod.status?.containerStatuses?.[0]?.containerID ?? '').replace(/^[a-z]+:\/\//, '');
  return { podName: pod.metadata?.name ?? '', podIP: pod.status?.podIP ?? '', containerID };
}

/**
 * A file as the container sees it: read by `cat` inside the container's mount namespace (nsenter), symlinks and all.
 */
function readInContainer(containerID: string, path: string): string {
  return execFileSync('nsenter', ['-t', containerPid(containerID), '-m', 'cat', path], { encoding: 'utf8' });
}

/** A process of the container (its cgroup names it). */
function containerPid(containerID: string): string {
  const pid = readdirSync('/proc').find((entry) => {
    if (!/^\d+$/.test(entry)) return false;
    try {
      return readFileSync(`/proc/${entry}/cgroup`, 'utf8').includes(containerID);
    } catch {
      return false;
    }
  });
  if (!pid) throw new Error(`no process of container ${containerID}`);
  return pid;
}

function jsonLines<T>(text: string): T[] {
  return text
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as T);
}

async function finished(run: DevopRun, what: string): Promise<number | null> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish\n${run.output}`)), RUN_DEADLINE_MS);
  });
  try {
    return (await Promise.race([run.exited, deadline])).code;
  } finally {
    clearTimeout(timer);
  }
}

function post(port: number, body: string): Promise<EchoAnswer> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        method: 'POST',
        path: '/forwarded',
        agent: false,
        headers: { 'content-length': Buffer.byteLength(body), connection: 'close' },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          try {
            resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')) as EchoAnswer);
          } catch (err) {
            reject(err);
          }
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

describe('outgoing traffic, DNS and remote files through the pod', { timeout: TEST_TIMEOUT_MS }, () => {
  let cluster: Cluster;
  let echo: EchoDeployment;
  let client: { podName: string; podIP: string; containerID: string };
  let clusterIP: string;
  const runs: DevopRun[] = [];
  const track = (run: DevopRun): DevopRun => {
    runs.push(run);
    return run;
  };

  beforeAll(async () => {
    const env = await startE2ECluster();
    cluster = env.cluster;
    // Given an echo Deployment behind a ClusterIP Service echo:80, and a client workload to run as
    echo = await deployEcho(env, 'echo');
    const service = await env.core.createNamespacedService({
      namespace: 'default',
      body: {
        metadata: { name: 'echo' },
        spec: { selector: { app: 'echo' }, ports: [{ port: 80, targetPort: 8080 }] },
      },
    });
    clusterIP = service.spec?.clusterIP ?? '';
    client = await deployClient(env, 'client');
  });

  afterAll(async () => {
    await Promise.all(runs.map((run) => run.dispose()));
    await cluster?.stop();
  });

  it('a local curl (proxy env) and a local Node fetch (preload) reach the service by its ClusterIP, from the pod', async () => {
    const script =
      `curl -sS --max-time 30 http://${clusterIP}/curl-by-ip && echo && ${process.execPath} ` +
      `${FETCH_CLIENT} http://${clusterIP}/node-by-ip`;
    const run = track(devopExec(cluster, ['-t', 'deploy/client'], ['sh', '-c', script]));
    expect(await finished(run, 'devop exec by ClusterIP'), run.output).toBe(0);
    const [curlAnswer, nodeLine] = jsonLines<EchoAnswer & { body: string }>(run.stdout);
    const nodeAnswer = JSON.parse(nodeLine?.body ?? '{}') as EchoAnswer;
    for (const [answer, path] of [
      [curlAnswer, '/curl-by-ip'],
      [nodeAnswer, '/node-by-ip'],
    ] as const) {
      expect(answer, run.output).toMatchObject({ pod: echo.podName, path });
      expect(answer.remoteAddress.replace(/^::ffff:/, '')).toBe(client.podIP);
    }
  });

  it('a local curl reaches the service by name.namespace and by full name through the proxy env, from the pod', async () => {
    // When curl (http_proxy for http://, and ALL_PROXY's socks5h:// given explicitly) asks for the service by name
    const script = [
      // Without devop's proxy env, curl would ask this machine's resolver (off the machine): refuse instead.
      'test -n "$http_proxy" -a -n "$ALL_PROXY"',
      'curl -sS --max-time 30 http://echo.default/by-short-name',
      'echo',
      'curl -sS --max-time 30 http://echo.default.svc.cluster.local/by-full-name',
      'echo',
      'curl -sS --max-time 30 -x "$ALL_PROXY" http://echo.default/through-socks',
      'echo',
    ].join(' && ');
    const run = track(devopExec(cluster, ['-t', 'deploy/client'], ['sh', '-c', script]));
    expect(await finished(run, 'devop exec curl'), run.output).toBe(0);
    // Then the echo pod answered each, and saw the connection come from the client pod's IP
    const answers = jsonLines<EchoAnswer>(run.stdout);
    expect(
      answers.map((a) => a.path),
      run.output,
    ).toEqual(['/by-short-name', '/by-full-name', '/through-socks']);
    for (const answer of answers) {
      expect(answer.pod).toBe(echo.podName);
      expect(answer.remoteAddress.replace(/^::ffff:/, '')).toBe(client.podIP);
    }
  });

  it("the local proxy serves only the session's secret: curl without it is refused; the secret is in no log line", async () => {
    // When the local command shows the secret devop gave it (in the proxy URL), then uses the proxy as another user
    // of this machine would: knowing the port (it is on loopback), not the secret
    const script = [
      'printf "url %s\\n" "$http_proxy"',
      'curl -sS -o /dev/null -w "no-secret-http %{http_code}\\n" -x "http://${http_proxy#*@}" http://echo.default/x',
      '(curl -sS -x "socks5h://${http_proxy#*@}" http://echo.default/x || echo no-secret-socks refused)',
      'curl -sS http://echo.default/with-secret',
      'echo',
    ].join(' && ');
    const run = track(devopExec(cluster, ['-t', 'deploy/client', '--verbose'], ['sh', '-c', script]));
    expect(await finished(run, 'devop exec curl without the secret'), run.output).toBe(0);
    const secret = /^url http:\/\/devop:([0-9a-f]{48})@127\.0\.0\.1:\d+$/m.exec(run.stdout)?.[1];
    expect(secret, run.output).toBeDefined();
    // Then without the secret HTTP is 407 and SOCKS5 is refused, with it the service answers
    expect(run.stdout).toContain('no-secret-http 407');
    expect(run.stdout).toContain('no-secret-socks refused');
    expect(jsonLines<EchoAnswer>(run.stdout).map((a) => a.path)).toEqual(['/with-secret']);
    // And devop said so, without the secret in any of its lines
    expect(run.stderr).toMatch(/the outgoing proxy refused a connection without the session's secret/);
    expect(run.stderr).not.toContain(secret);
  });

  it('a local Node program with plain fetch reaches the service by name; an unknown name is ENOTFOUND', async () => {
    const run = track(
      devopExec(
        cluster,
        ['-t', 'deploy/client'],
        [
          process.execPath,
          FETCH_CLIENT,
          'http://echo.default/node-short',
          'http://echo.default.svc.cluster.local/node-full',
          'http://nosuch.default/',
        ],
      ),
    );
    expect(await finished(run, 'devop exec node'), run.output).toBe(0);
    const lines = jsonLines<{ url: string; status?: number; body?: string; error?: string }>(run.stdout);
    expect(lines, run.output).toHaveLength(3);
    for (const line of lines.slice(0, 2)) {
      expect(line.status, run.output).toBe(200);
      const answer = JSON.parse(line.body ?? '{}') as EchoAnswer;
      expect(answer.pod).toBe(echo.podName);
      expect(answer.remoteAddress.replace(/^::ffff:/, '')).toBe(client.podIP);
    }
    // Not a hang (the answer comes from the pod's DNS), not a timeout: the program's own ENOTFOUND.
    expect(lines[2], run.output).toMatchObject({ url: 'http://nosuch.default/', error: 'ENOTFOUND' });
  });

  it('an excluded host is dialled locally (from this machine, not from the pod)', async () => {
    const url = `http://${echo.podIP}:8080/excluded`;
    // Given the same program, once with the echo pod's IP excluded and once without
    const local = track(
      devopExec(
        cluster,
        ['-t', 'deploy/client', '--outgoing-exclude', echo.podIP],
        [process.execPath, FETCH_CLIENT, url],
      ),
    );
    expect(await finished(local, 'devop exec excluded'), local.output).toBe(0);
    const routed = track(devopExec(cluster, ['-t', 'deploy/client'], [process.execPath, FETCH_CLIENT, url]));
    expect(await finished(routed, 'devop exec routed'), routed.output).toBe(0);
    const sourceOf = (run: DevopRun): string => {
      const [line] = jsonLines<{ body?: string }>(run.stdout);
      return (JSON.parse(line?.body ?? '{}') as EchoAnswer).remoteAddress?.replace(/^::ffff:/, '');
    };
    // Then the excluded connection came from the node (this machine's bridge address), the other from the client pod
    expect(sourceOf(local), local.output).toBe(cluster.nodeIP);
    expect(sourceOf(routed), routed.output).toBe(client.podIP);
  });

  it(
    '--remote-file copies files that exist only in the pod (its /etc/hosts, its service-account token) under ' +
      'DEVOP_ROOT, removed at exit',
    async () => {
      // Given the pod's /etc/hosts (the kubelet's, in the pod's own mount namespace: it names the pod; this machine's
      // does not) and the service-account token the kubelet mounted for it (which this machine does not have)
      const token = '/var/run/secrets/kubernetes.io/serviceaccount/token';
      const podHosts = readInContainer(client.containerID, '/etc/hosts');
      const podToken = readInContainer(client.containerID, token);
      expect(podHosts).toContain(`${client.podIP}\t${client.podName}`);
      expect(readFileSync('/etc/hosts', 'utf8')).not.toContain(client.podName);
      expect(podToken.length).toBeGreaterThan(20);
      expect(existsSync(token)).toBe(false);
      // When devop exec copies both for a local command that prints them
      const run = track(
        devopExec(
          cluster,
          ['-t', 'deploy/client', '--remote-file', '/etc/hosts', '--remote-file', token],
          [
            'sh',
            '-c',
            `echo "ROOT=$DEVOP_ROOT"; cat "$DEVOP_ROOT/etc/hosts"; echo "TOKEN=$(cat "$DEVOP_ROOT${token}")"`,
          ],
        ),
      );
      expect(await finished(run, 'devop exec remote-file'), run.output).toBe(0);
      // Then the local command read exactly the pod's contents under DEVOP_ROOT (same relative paths)
      const root = /ROOT=(\S+)\n/.exec(run.stdout)?.[1] ?? '';
      expect(root).not.toBe('');
      const printed = run.stdout.slice(run.stdout.indexOf('\n') + 1);
      expect(printed).toBe(`${podHosts}TOKEN=${podToken.trim()}\n`);
      // And the copies are gone once devop has exited
      expect(existsSync(root)).toBe(false);
    },
  );

  it('a remote file that does not exist in the pod stops devop with one line naming it', async () => {
    const run = track(devopExec(cluster, ['-t', 'deploy/client', '--remote-file', '/etc/not-in-the-pod'], ['true']));
    expect(await finished(run, 'devop exec missing remote-file')).toBe(1);
    expect(run.stderr).toContain('remote file /etc/not-in-the-pod does not exist in the target container');
  });

  it(
    'devop port-forward -L 18080:echo.default:80 (targetless) serves requests; 100 parallel connections are ' +
      'byte-exact',
    async () => {
      const run = track(
        new DevopRun(['port-forward', '--kubeconfig', cluster.kubeconfigPath, '-L', `${FORWARD_PORT}:echo.default:80`]),
      );
      await waitFor(
        () => `the forward to listen\n${run.output}`,
        () => {
          if (run.child.exitCode !== null) throw new Error(`devop port-forward exited\n${run.output}`);
          return run.stdout.includes(`127.0.0.1:${FORWARD_PORT} -> echo.default:80`) ? true : undefined;
        },
        RUN_DEADLINE_MS,
      );
      // When 100 clients post distinct 32 KiB bodies at once
      const bodies = Array.from({ length: 100 }, () => randomBytes(24 * 1024).toString('base64'));
      const answers = await Promise.all(bodies.map((body) => post(FORWARD_PORT, body)));
      // Then each body came back exactly, from the echo pod, connected from the (targetless) agent's pod
      answers.forEach((answer, i) => {
        expect(answer.pod).toBe(echo.podName);
        expect(answer.body === bodies[i], `body ${i} differs`).toBe(true);
      });
      // When Ctrl-C / Then it stops cleanly
      const exit = await run.stop('SIGINT');
      expect(exit.code, run.output).toBe(0);
    },
  );

  it("devop port-forward -t deploy/client to a pod's address goes through the agent's native data path", async () => {
    const to = `${echo.podIP}:8080`;
    const run = track(
      new DevopRun(['port-forward', '--kubeconfig', cluster.kubeconfigPath, '-t', 'deploy/client', '-L', `0:${to}`]),
    );
    const match = await waitFor(
      () => `the forward to listen\n${run.output}`,
      () => {
        if (run.child.exitCode !== null) throw new Error(`devop port-forward exited\n${run.output}`);
        return new RegExp(`127\\.0\\.0\\.1:(\\d+) -> ${to.replaceAll('.', '\\.')}`).exec(run.stdout) ?? undefined;
      },
      RUN_DEADLINE_MS,
    );
    // When a client opens a connection through the forward and starts a request
    const socket = connect(Number(match[1]), '127.0.0.1');
    const body = 'through devop-splice';
    socket.write(`POST /native HTTP/1.1\r\nhost: echo\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n`);
    // Then, in the client pod's netns, the connection to the echo pod belongs to devop-splice (not the agent's node)
    const owners = await waitFor('the connection in the pod', () => {
      const ss = execFileSync('nsenter', ['-t', containerPid(client.containerID), '-n', 'ss', '-tnpH', 'dst', to], {
        encoding: 'utf8',
      });
      return ss.includes('ESTAB') ? ss : undefined;
    });
    expect(owners).toContain('"devop-splice"');
    expect(owners).not.toContain('"node"');
    // And the request is answered by the echo pod, which saw the client pod's IP
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    await new Promise((resolve) => socket.end(body, () => socket.once('close', resolve)));
    const answer = JSON.parse(Buffer.concat(chunks).toString('utf8').split('\r\n\r\n')[1]) as EchoAnswer;
    expect(answer).toMatchObject({ pod: echo.podName, path: '/native', body });
    expect(answer.remoteAddress.replace(/^::ffff:/, '')).toBe(client.podIP);
    const exit = await run.stop('SIGINT');
    expect(exit.code, run.output).toBe(0);
  });

  it('devop port-forward -t deploy/client connects from that pod: its search domains, its IP', async () => {
    const run = track(
      new DevopRun(['port-forward', '--kubeconfig', cluster.kubeconfigPath, '-t', 'deploy/client', '-L', '0:echo:80']),
    );
    const match = await waitFor(
      () => `the forward to listen\n${run.output}`,
      () => {
        if (run.child.exitCode !== null) throw new Error(`devop port-forward exited\n${run.output}`);
        return /127\.0\.0\.1:(\d+) -> echo:80/.exec(run.stdout) ?? undefined;
      },
      RUN_DEADLINE_MS,
    );
    // The short name "echo" resolves with the client pod's search domains, and the echo pod sees the client pod's IP
    const answer = await post(Number(match[1]), 'from the target pod');
    expect(answer).toMatchObject({ pod: echo.podName, body: 'from the target pod' });
    expect(answer.remoteAddress.replace(/^::ffff:/, '')).toBe(client.podIP);
    const exit = await run.stop('SIGINT');
    expect(exit.code, run.output).toBe(0);
  });
});
